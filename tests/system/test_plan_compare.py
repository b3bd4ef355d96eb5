"""``gpudeck plan compare`` on plan.json files written here, ``plan extract``'s GPUs and price,
and the pilot's rate counted in its steady state (a pilot simulated in memory): no process,
but the last test, which runs two real pilots against two sim-engines.

The system tier's tests of this file (real processes and servers); the others are in
tests/unit/test_plan_compare.py."""

from __future__ import annotations

import json
import subprocess

import pytest

from support.plan_compare import prompts  # noqa: F401


# ---------------------------------------------------------------- two real pilots, compared

@pytest.mark.system
@pytest.mark.timeout(300)
def test_two_real_pilots_compared_by_the_command(tmp_path, sim_engines):
    from support.generate import PY, ROOT, child_env
    from support.plan import write_prompts

    prompts = tmp_path / "prompts.jsonl"
    # many prompts for a short pilot: the runs compared last a minute, so the few seconds of each
    # worker's start (longer and noisier on a busy machine) cannot decide which is faster
    write_prompts(prompts, 2000)
    slow, fast = sim_engines("--latency-ms", "200"), sim_engines("--latency-ms", "50")

    def cli(*argv: str) -> subprocess.CompletedProcess:
        return subprocess.run([PY, "-m", "gpudeck.console", "plan", *argv], capture_output=True, text=True,
                              env=child_env(), cwd=ROOT, timeout=240)

    for name, sim in (("slow", slow), ("fast", fast)):
        r = cli("generate", "--prompts", str(prompts), "--out", str(tmp_path / name), "--server", sim.url,
                "--pilot", "40", "--concurrency", "2,4", "--hold", "5", "--max-tokens", "200",
                "--price-per-hour", "1")
        assert r.returncode == 0, r.stderr[-3000:]
    plans = {n: json.loads((tmp_path / n / "plan.json").read_text()) for n in ("slow", "fast")}
    assert plans["slow"]["dataset"] == plans["fast"]["dataset"]
    assert plans["slow"]["dataset"]["bytes"] == prompts.stat().st_size
    # the slow server is 4x slower: 2 of them make half the fast one's completions (faster: fast), at
    # $0.2 an hour against $1 (cheaper: slow); each by about 2x, a margin for a busy machine's rates
    r = cli("compare", f"{tmp_path / 'slow'},servers=2,price=0.1", f"{tmp_path / 'fast'}", "--json")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert (doc["cheaper"], doc["faster"]) == ("slow", "fast"), doc
    r = cli("compare", str(tmp_path / "slow"))
    assert r.returncode == 2 and "at least two plans" in r.stderr
