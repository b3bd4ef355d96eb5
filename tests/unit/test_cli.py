"""The headless commands, run as a user would: the `gpudeck` program on a fleet file.

The unit tier's tests of this file (starts nothing); the others are in tests/system/test_cli.py."""

from __future__ import annotations


def test_deploy_summary_names_the_failed_nodes_and_their_step():
    from gpudeck.console.commands.deploy import summary
    from gpudeck.remote.deploy import DeployError, Deployed
    ok = Deployed("gpu1", "0.2.0", "/v", "/v/bin/python", "present", 3.0)
    line = summary([ok, DeployError("gpu2", "sftp", "no space")], 12.34)
    assert line == "deployed gpudeck to 1 of 2 node(s) in 12.3 s; failed: gpu2 (at sftp)"
