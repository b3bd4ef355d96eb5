"""A job's log: the tail in linear time, a follower that keeps up with a chatty job, and the
size cap that keeps a job from filling the node's disk.

The unit tier's tests of this file (starts nothing); the others are in tests/system/test_joblog.py."""

from __future__ import annotations

import os

from gpudeck.agents.jobs import joblog


def test_a_follower_far_behind_skips_to_the_live_end_and_is_told(tmp_path):
    log = tmp_path / "job.log"
    with open(log, "wb") as f:
        f.write(b"".join(b"old %07d\n" % i for i in range(2_000_000)))  # 24 MB
    size = log.stat().st_size
    chunk = joblog.read_on("j", log, 0)
    assert chunk.skipped > size - joblog.FOLLOW_MAX_BEHIND  # the old follow read on from 0, 1 MiB at a time
    assert chunk.text.startswith("old ") and chunk.text.endswith("old 1999999\n")  # whole lines, the newest
    assert chunk.offset == size
    with open(log, "ab") as f:
        f.write(b"new\n")
    nxt = joblog.read_on("j", log, chunk.offset)
    assert (nxt.text, nxt.skipped) == ("new\n", 0)
    os.truncate(log, 0)  # cut: the follower's offset is past the end, so everything there is new
    with open(log, "ab") as f:
        f.write(b"after the cut\n")
    assert joblog.read_on("j", log, nxt.offset).text == "after the cut\n"
