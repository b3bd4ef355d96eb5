"""``FleetClient.request(op)`` hands its caller ``op.Result`` statically: the type checker,
run over a caller, knows a status is a Snapshot and a kill a KillVerdict, and refuses an
answer taken for another op's. (The type checker reads the whole of agents/ and remote/: a few
seconds, so the system tier.)"""

from __future__ import annotations

import pytest

from support import ROOT

CALLER = '''\
from gpudeck.agents.contract import ops
from gpudeck.agents.contract.wire import KillVerdict, Snapshot
from gpudeck.remote.client import FleetClient
from gpudeck.remote.link import AgentLink


async def caller(client: FleetClient, link: AgentLink) -> None:
    status: Snapshot = await client.request(ops.Status(), node="gpu-1")
    reveal_type(await client.request(ops.Kill(job="gen")))
    reveal_type(await link.request(ops.Logs(job="gen")))
    wrong: KillVerdict = await client.request(ops.Status(), node="gpu-1")
'''


def test_a_request_s_answer_is_its_op_s_result_type_to_the_type_checker(tmp_path):
    api = pytest.importorskip("mypy.api", reason="mypy is not installed in this venv ('.[check]' installs it)")
    (tmp_path / "gpudeck").symlink_to(ROOT, target_is_directory=True)  # the package by its name
    (tmp_path / "caller.py").write_text(CALLER)
    out, err, _ = api.run(["--strict", "--follow-imports=silent", "--no-error-summary",
                           "--cache-dir", str(tmp_path / "cache"), str(tmp_path / "caller.py")])
    said = [line.split(": ", 1)[1] for line in out.splitlines() if line.startswith(str(tmp_path / "caller.py"))]
    assert said[:2] == ['note: Revealed type is "gpudeck.agents.contract.wire.KillVerdict"',
                        'note: Revealed type is "gpudeck.agents.contract.wire.LogChunk"'], out + err
    # a status's answer taken for a kill's (mypy words it as the argument's type or the assignment's)
    assert len(said) == 3 and said[2].startswith("error: ") and "KillVerdict" in said[2], out + err
