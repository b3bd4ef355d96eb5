"""Resume: the extraction worker killed with SIGKILL at random points, relaunched each time,
ends with every sample in exactly one shard; and each state a crash can leave is repaired.

The unit tier's tests of this file (starts nothing); the others are in
tests/system/test_extract_resume.py."""

from __future__ import annotations

import glob
import os

import pytest

pytest.importorskip("torch", reason="torch is needed by the extraction worker (pip install '.[extract]')")
pytest.importorskip("transformers", reason="transformers is needed by the extraction worker")
pytest.importorskip("safetensors", reason="safetensors is needed by the extraction worker")


def test_publish_many_keeps_the_order_and_one_line_per_shard(tmp_path):
    """The finalizer publishes the sealed shards waiting for it together: each renamed, one
    index line each, every id in the done-set, and the output reads back."""
    import numpy as np

    from gpudeck.agents.workers.common.doneset import DoneSet
    from gpudeck.agents.workers.extract.layout import DONESET, INDEX
    from gpudeck.agents.workers.extract.reader import open_extract
    from gpudeck.agents.workers.extract.store import (IndexLog, ShardWriter, header_reserve_for, publish_many, read_index,
                                                      seal)

    out = str(tmp_path)
    index = IndexLog(out)
    done = DoneSet.open(os.path.join(out, DONESET))
    closed = []
    for no in range(3):
        w = ShardWriter(out, no, 4, "BF16", [1], header_reserve_for(10), {"model": "m"})
        for k in range(2):
            n = 3 + k
            hidden = np.full((n, 4), no * 10 + k, dtype=np.uint16)
            w.add(f"s{no}-{k}", memoryview(hidden.view(np.uint8).reshape(-1)), np.arange(n), np.ones(n, np.uint8))
        c = w.close()
        seal(c)
        closed.append(c)
    publish_many(closed, index, done)
    index.close()
    done.close()
    assert not glob.glob(os.path.join(out, ".shard-*"))
    entries = read_index(os.path.join(out, INDEX))
    assert [e["shard"] for e in entries] == [f"shard-{no:06d}.safetensors" for no in range(3)]
    again = DoneSet.open(os.path.join(out, DONESET))
    assert all(f"s{no}-{k}" in again for no in range(3) for k in range(2))
    assert len(open_extract(out)) == 6
