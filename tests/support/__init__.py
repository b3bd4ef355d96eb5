"""What the tests share, in one package (no test imports conftest, which holds fixtures only):

- ``support.core``: paths, a real agent over pipes, job specs, a free port;
- ``support.wait``: the one waiter on a condition, ``wait_for`` and ``wait_for_async``;
- ``support.s3``: the one S3 server (moto on loopback) and the environment to reach it;
- ``support.slurm``: a real single-node Slurm cluster (``SlurmCluster``) and its fixtures;
- ``support.generate`` / ``extract`` / ``ssh`` / ``tui``: the real parts of each area's tests;
- ``support.fault_proxy``: a TCP proxy that resets, hangs or refuses on command.

The names of ``support.core`` are importable from ``support`` itself.
"""

from support.core import (FIXTURES, PY, ROOT, AgentProc, command_job, env_with_repo, free_port, pid_alive,  # noqa: F401
                          read_jsonl_strict, reap)
