"""Progress: a done-set counted while it grows, progress.json, rates, ETAs.

The system tier's tests of this file (real processes and servers); the others are in
tests/unit/test_progress.py."""

from __future__ import annotations

import subprocess
import sys

import pytest

from gpudeck.agents.sense.progress import DoneSetCounter


@pytest.mark.system
def test_done_set_counted_incrementally_while_a_process_appends(tmp_path):
    path = tmp_path / "done.txt"
    writer = subprocess.Popen([sys.executable, "-c", f"""
import os, sys, time
with open({str(path)!r}, "ab", buffering=0) as f:
    for i in range(5000):
        f.write(b"id-%d\\n" % i)
        if i % 500 == 0:
            time.sleep(0.01)
"""])
    counter = DoneSetCounter(str(path))
    seen = []
    while writer.poll() is None:
        seen.append(counter.poll())
    writer.wait()
    assert counter.poll() == 5000
    assert seen == sorted(seen), "the count never goes back"
    assert counter.offset == path.stat().st_size
