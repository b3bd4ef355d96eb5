"""A full disk never locks the operator out: the node's home on a small tmpfs, filled by a job.
`status` shows the node reachable with a disk alert naming the write that failed, `kill`
frees the job and says so, `logs` works, and the state files keep their last good version."""

from __future__ import annotations

import json
import os
import shutil
import subprocess

import psutil
import pytest

from support.cli import gpudeck
from support.wait import wait_for


def _missing() -> str:
    if os.geteuid() != 0:
        return "needs root to mount a tmpfs"
    if not shutil.which("mount"):
        return "needs mount(8)"
    return ""


pytestmark = [pytest.mark.system, pytest.mark.skipif(bool(_missing()), reason=_missing() or "-")]


@pytest.fixture
def small_home(tmp_path):
    mnt = tmp_path / "small"
    mnt.mkdir()
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m,mode=0700", "tmpfs", str(mnt)], capture_output=True,
                       text=True)
    if r.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {r.stderr.strip()}")
    yield mnt / "home"
    for p in psutil.process_iter(["cwd", "cmdline"]):  # the job (its cwd is there) and any agent
        if str(mnt) in (p.info["cwd"] or "") or str(mnt) in " ".join(p.info["cmdline"] or []):
            try:
                p.kill()
            except psutil.Error:
                pass
    wait_for(lambda: subprocess.run(["umount", str(mnt)], capture_output=True).returncode == 0, 30,
             what="the tmpfs unmounted")


def test_a_full_home_never_stops_status_kill_or_logs(tmp_path, small_home):
    home = small_home
    fleet = tmp_path / "fleet.toml"
    fleet.write_text(f'''
[defaults]
home = "{home}"
nvml = false
interval = 0.2

[[notify]]
url = "http://127.0.0.1:9/hook"

[[jobs]]
name = "filler"
command = "until [ -s {home}/jobs/filler/state.json ]; do sleep 0.1; done; echo filling; dd if=/dev/zero of={home}/fill bs=64k 2>/dev/null; echo full; exec sleep 600"
''')
    f = ["-f", str(fleet)]
    gpudeck("launch", "filler", *f)
    wait_for(lambda: "full" in (home / "jobs" / "filler" / "job.log").read_text(), 60, what="the disk full")
    assert shutil.disk_usage(home).free < 64 * 1024
    state_before = (home / "jobs" / "filler" / "state.json").read_text()

    r = gpudeck("status", "--json", *f, check=False)
    assert r.returncode == 0, r.stdout + r.stderr
    doc = json.loads(r.stdout)
    assert doc["nodes"][0]["reachable"] is True, doc["nodes"]
    disk = [a for a in doc["alerts"] if a["kind"] == "disk_full"]
    assert disk and any("cannot write" in a["message"] and "No space left" in a["message"] for a in disk), doc["alerts"]
    assert next(j for j in doc["jobs"] if j["name"] == "filler")["state"] == "running"

    r = gpudeck("logs", "filler", *f, check=False)
    assert r.returncode == 0 and "filling" in r.stdout, r.stdout + r.stderr

    r = gpudeck("kill", "filler", "--grace", "1", *f, check=False)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "killed" in r.stdout.lower() or "stopped" in r.stdout.lower(), r.stdout
    json.loads((home / "jobs" / "filler" / "state.json").read_text())  # whole: the last good version at worst
    assert state_before  # (read above while it could be written)

    (home / "fill").unlink()  # room again: the next writes succeed and the alert clears
    wait_for(lambda: not [a for a in json.loads(gpudeck("status", "--json", *f).stdout)["alerts"]
                          if a["kind"] == "disk_full" and "cannot write" in a["message"]], 60,
             what="the disk alert cleared")
