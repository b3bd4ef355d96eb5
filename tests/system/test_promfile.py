"""The node's Prometheus textfile (agents/node/promfile.py): the fleet key that turns it on, a real
agent writing ``gpudeck.prom`` whose every series agrees with the snapshot it was written from,
and a directory that cannot be written: one alert, the agent ticks on, a retry at most every
RETRY_S seconds.

The system tier's tests of this file (real processes and servers); the others are in
tests/unit/test_promfile.py."""

from __future__ import annotations

import subprocess
import sys

import pytest

from support import command_job
from support.wait import wait_for
from gpudeck.agents.contract.vocab import AlertKind
from support.promfile import MIB, parse

PY = sys.executable
NODE = "testnode"  # AgentProc's --node


def expected(snap: dict) -> dict[str, list[tuple[dict[str, str], float]]]:
    """What the textfile must say of a snapshot (as the console receives it), worked out here
    from the snapshot's own fields."""
    node = snap["node"]
    out: dict[str, list[tuple[dict[str, str], float]]] = {k: [] for k in (
        "gpudeck_job_state", "gpudeck_job_tokens_per_second", "gpudeck_job_done", "gpudeck_job_total",
        "gpudeck_job_eta_seconds", "gpudeck_job_restarts_total", "gpudeck_gpu_memory_used_bytes",
        "gpudeck_s3_pending_uploads", "gpudeck_alerts_active", "gpudeck_snapshot_timestamp_seconds")}
    for j in snap["jobs"]:
        lab = {"node": node, "job": j["name"]}
        out["gpudeck_job_state"].append(({**lab, "state": j["state"]}, 1.0))
        p = j["progress"]
        tps = (p or {}).get("tokens_per_s")
        if tps is None and j["engine"]:
            tps = j["engine"].get("tokens_per_s")
        if tps is not None:
            out["gpudeck_job_tokens_per_second"].append((lab, tps))
        if p is not None:
            out["gpudeck_job_done"].append((lab, p["done"]))
            for key, series in (("total", "gpudeck_job_total"), ("eta_s", "gpudeck_job_eta_seconds")):
                if p[key] is not None:
                    out[series].append((lab, p[key]))
        if j["restart"] is not None:
            out["gpudeck_job_restarts_total"].append((lab, j["restarts"]))
    for g in snap["gpus"]:
        by_job: dict[str, float] = {}
        for proc in g["processes"]:
            if proc["job"]:
                by_job[proc["job"]] = by_job.get(proc["job"], 0.0) + proc["used_mib"]
        for name, mib in by_job.items():
            out["gpudeck_gpu_memory_used_bytes"].append(({"node": node, "gpu": str(g["index"]), "job": name}, mib * MIB))
        out["gpudeck_gpu_memory_used_bytes"].append(
            ({"node": node, "gpu": str(g["index"]), "job": ""}, (g["mem_used_mib"] - sum(by_job.values())) * MIB))
    console_only = (AlertKind.UNREACHABLE, AlertKind.AGENT_FAILED)  # raised by the console alone
    kinds = {k.value: 0 for k in AlertKind if k not in console_only}
    for a in snap["alerts"]:
        kinds[a["kind"]] += 1
    out["gpudeck_alerts_active"] = [({"node": node, "kind": k}, n) for k, n in kinds.items()]
    out["gpudeck_snapshot_timestamp_seconds"].append(({"node": node}, snap["t"]))
    return out


def same(got: dict, want: dict) -> None:
    for name, samples in want.items():
        key = lambda s: sorted(s[0].items())  # noqa: E731
        g = sorted(got.get(name, []), key=key)
        w = sorted(samples, key=key)
        assert [s[0] for s in g] == [s[0] for s in w], f"{name}: series {g} != {w}"
        for (lab, gv), (_, wv) in zip(g, w):
            assert gv == pytest.approx(float(wv), rel=1e-12), f"{name}{lab}: {gv} != {wv}"


# ---------------------------------------------------------------- a real agent


@pytest.mark.system
def test_a_real_agent_writes_every_series_of_its_snapshot(start_agent, home, reap_jobs, tmp_path):
    textfile = tmp_path / "textfile"
    textfile.mkdir()
    a = start_agent(extra_args=("--simulate-gpus", "2xH200:141", "--textfile-dir", str(textfile)))
    stranger = subprocess.Popen([PY, "-m", "gpudeck.agents.simgpu", str(home), "1", "1024", "--", "sleep", "600"],
                                start_new_session=True)
    report = tmp_path / "report.sh"  # a worker that reports progress, as a generation worker does
    report.write_text('i=0; while true; do i=$((i+1)); printf \'{"done": %d, "total": 100000, "tokens": %d, '
                      '"tokens_per_s": 1500.0, "eta_s": 9999}\' $i $((i*300)) > "$GPUDECK_PROGRESS_FILE.tmp"; '
                      'mv "$GPUDECK_PROGRESS_FILE.tmp" "$GPUDECK_PROGRESS_FILE"; sleep 0.2; done\n')
    try:
        a.ok("configure", jobs=[
            command_job("gen", f"exec {PY} -m gpudeck.agents.simgpu {home} 0 2048 -- sh {report}", gpus=[0],
                        restart="on-failure"),
            command_job("later", "sleep 600", gpus=[1])])  # never launched: pending, no progress
        a.ok("launch", job="gen")

        def ready(snap: dict) -> bool:
            gen = a.job(snap, "gen")
            p = gen["progress"]
            return (gen["state"] == "running" and p is not None and p["tokens_per_s"] is not None
                    and p["eta_s"] is not None and any(q["job"] == "gen" for q in snap["gpus"][0]["processes"])
                    and any(q["job"] is None for q in snap["gpus"][1]["processes"]))

        def written():
            """The textfile and the snapshot it was written from (the one with its timestamp)."""
            try:
                got = parse((textfile / "gpudeck.prom").read_text())
            except FileNotFoundError:
                return None
            t = got["gpudeck_snapshot_timestamp_seconds"][0][1]
            snap = next((s for s in list(a.snapshots) if s["t"] == t), None)
            return (got, snap) if snap is not None and ready(snap) else None

        def detail() -> str:
            snap = a.latest() or {"jobs": [], "gpus": []}
            return f"last snapshot: jobs {snap['jobs']}\ngpus {snap['gpus']}\nstderr {''.join(a.stderr)[-2000:]}"

        got, snap = wait_for(written, what="a textfile of a snapshot with the job running on GPU 0", detail=detail)
        assert {lab["node"] for samples in got.values() for lab, _ in samples} == {NODE}
        same(got, expected(snap))
        # what the snapshot says, said again in the file's own terms
        assert ({"node": NODE, "job": "later", "state": "pending"}, 1.0) in got["gpudeck_job_state"]
        assert not [s for s in got["gpudeck_job_done"] if s[0]["job"] == "later"]  # no progress: no sample
        assert ({"node": NODE, "gpu": "0", "job": "gen"}, 2048.0 * MIB) in got["gpudeck_gpu_memory_used_bytes"]
        assert ({"node": NODE, "gpu": "1", "job": ""}, (420.0 + 1024.0) * MIB) in got["gpudeck_gpu_memory_used_bytes"]
        assert ({"node": NODE, "kind": "unowned_gpu_process"}, 1.0) in got["gpudeck_alerts_active"]
        assert ({"node": NODE, "job": "gen"}, 0.0) in got["gpudeck_job_restarts_total"]
        assert got["gpudeck_s3_pending_uploads"] == []  # the upload backlog does not reach the snapshot yet
        assert not list(textfile.glob("gpudeck.prom.*")), "a temp file was left behind"
        a.ok("kill", job="gen", grace_s=1)
    finally:
        stranger.kill()
        stranger.wait()


@pytest.mark.system
def test_a_missing_textfile_dir_is_one_alert_and_the_agent_ticks_on(start_agent, tmp_path):
    missing = tmp_path / "no-such-dir"
    a = start_agent(extra_args=("--textfile-dir", str(missing)))
    path = str(missing / "gpudeck.prom")
    first = a.wait_snapshot(lambda s: any(path in al["message"] for al in s["alerts"]), what="the textfile alert")
    later = a.wait_snapshot(lambda s: s["seq"] >= first["seq"] + 10, what="ten more ticks")
    for snap in (first, later):
        mine = [al for al in snap["alerts"] if path in al["message"]]
        assert len(mine) == 1 and mine[0]["kind"] == "disk_full", snap["alerts"]
        assert "No such file or directory" in mine[0]["message"]
    assert a.proc.poll() is None
    assert sum(f"cannot write {path}" in line for line in a.stderr) == 1, a.stderr  # logged once
    assert not missing.exists()  # the agent makes no directory of its own
