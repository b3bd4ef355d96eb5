"""What tests/tui/test_cost.py and tests/unit/test_cost.py share (split out of tests/test_cost.py when the
suite went into tiers)."""

from __future__ import annotations

import dataclasses
from gpudeck.agents.contract.documents import drift_pct
from gpudeck.agents.contract.wire import Host, JobPlan, JobStatus, Progress, Snapshot
from gpudeck.console.state import FleetState
from gpudeck.remote.fleet import parse_fleet

NOW = 1_764_504_000.0
HOUR = 3600.0
PLANNED = 5 * 86400 + 2 * 3600  # "5d 2h": the seed's plan
REAL = 16 * 86400 + 11 * 3600  # "16d 11h": where its real rate heads


# ---------------------------------------------------------------- dollars


def _gen(name, tps, rate, useful=None, useful_of=None, first=NOW - 5 * HOUR, eta=None, state="running"):
    return JobStatus(name, "generate", state, started_at=first, first_started_at=first,
                     progress=Progress(done=100, total=1000, tokens_per_s=tps, rate_per_s=rate, eta_s=eta,
                                       useful=useful, useful_of=useful_of))


PRICED = '''
[[nodes]]
name = "gpu-a"
host = "gpu-a.example"
price_per_hour = 36

[[nodes]]
name = "gpu-b"
host = "gpu-b.example"
'''


def _priced_state() -> FleetState:
    state = FleetState(parse_fleet(PRICED, "priced.toml"), clock=lambda: NOW)
    host = Host("h", 1.0, 1, 1, 2, 0.0, 0.0, 0.0)
    gen = _gen("gen", 10_000.0, 2.0, useful=900, useful_of=1000, first=NOW - 5 * HOUR, eta=2.5 * HOUR)
    gen = dataclasses.replace(gen, plan=JobPlan("/data/plan.json", PLANNED, REAL, drift_pct(PLANNED, REAL)))
    state.apply(Snapshot("gpu-a", 1, NOW, host, [], [gen]))
    state.apply(Snapshot("gpu-b", 1, NOW, host, [], [_gen("gen-b", 5_000.0, 1.0, eta=HOUR)]))
    return state
