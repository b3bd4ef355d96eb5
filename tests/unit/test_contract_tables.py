"""The contract's tables (agents/contract/): a job's exit codes and the history's figure names,
each spelled once and read from there by the programs, the node and the console."""

from __future__ import annotations

import re

from support import ROOT

from gpudeck.agents.contract import exits
from gpudeck.agents.contract.ops import GPU_FIGURES, JOB_FIGURES, QUALITY_FIGURES

WINGS = ("agents", "console", "remote")


def _product_lines():
    for wing in WINGS:
        for path in sorted((ROOT / wing).rglob("*.py")):
            for number, line in enumerate(path.read_text().splitlines(), 1):
                yield path.relative_to(ROOT).as_posix(), number, line


def test_a_job_s_exit_codes_are_spelled_in_the_contract_alone():
    from gpudeck.agents.contract.fencing import EXIT_FENCED
    from gpudeck.agents.contract.jobs import EXIT_DATA
    from gpudeck.agents.staging.run import EXIT_STAGE_FAILED
    from gpudeck.agents.workers.extract.options import EXIT_AUDIT, EXIT_DISK, EXIT_STOPPED
    from gpudeck.agents.workers.generate.options import EXIT_QUALITY, EXIT_TERM
    from gpudeck.console.commands.common import EXIT_TERMINATED

    assert EXIT_DATA == EXIT_AUDIT == EXIT_QUALITY == exits.EXIT_DATA and EXIT_FENCED == exits.EXIT_FENCED
    assert EXIT_STOPPED == EXIT_TERM == EXIT_TERMINATED == exits.EXIT_TERMINATED
    assert (EXIT_DISK, EXIT_STAGE_FAILED) == (exits.EXIT_DISK, exits.EXIT_STAGE_FAILED)
    # gpudeck's own codes given a number anywhere else (0, 1 and 2 are every program's; the
    # console's command codes are its own)
    names = {n for n in vars(exits) if n.startswith("EXIT_")} - {"EXIT_OK", "EXIT_FAIL", "EXIT_USAGE"} \
        | {"EXIT_AUDIT", "EXIT_QUALITY", "EXIT_TERM", "EXIT_STOPPED"}
    spelled = [f"{path}:{number}: {line.strip()}" for path, number, line in _product_lines()
               if path != "agents/contract/exits.py" and path != "console/commands/common.py"
               and any(re.search(rf"\b{name}\b[^=\n]*=\s*\d", line) for name in names)]
    assert spelled == []


def test_the_history_s_figure_names_are_spelled_in_the_contract_alone():
    from gpudeck.agents.history.db import GPU_METRICS, JOB_METRICS
    from gpudeck.console.state import GPU_PAGE_FIGURE, PAGE_FIGURES

    assert GPU_METRICS == GPU_FIGURES and JOB_METRICS == JOB_FIGURES + QUALITY_FIGURES
    assert set(PAGE_FIGURES) <= set(JOB_FIGURES) and GPU_PAGE_FIGURE == "util_pct"
    # the names as a table: two of them side by side in a tuple, anywhere but ops.py
    pairs = [f'"{a}", "{b}"' for table in (GPU_FIGURES, JOB_FIGURES, QUALITY_FIGURES) for a, b in zip(table, table[1:])]
    spelled = [f"{path}:{number}: {line.strip()}" for path, number, line in _product_lines()
               if path != "agents/contract/ops.py" and any(p in line for p in pairs)]
    assert spelled == []


def test_an_endpoint_s_credentials_are_cut_by_one_helper():
    from gpudeck.agents.contract.watching import redact_url

    assert redact_url("http://AKIA:secret@minio:9000/b") == "http://minio:9000/b"
    assert redact_url("https://s3.example.com") == "https://s3.example.com" and redact_url(None) is None
    cutters = [path for path, _, line in _product_lines() if 'netloc.rsplit("@", 1)' in line]
    assert cutters == ["agents/contract/watching.py"], cutters
