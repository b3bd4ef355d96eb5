"""The last hour of compact samples, so a client that reconnects (after a laptop's sleep,
a dropped link) can redraw what it missed.

The agent lives only as long as its client's link, so the ring is also appended to
``<home>/history.jsonl`` (one short line a tick, no fsync) and read back by the next agent.
The file is rewritten with just the last hour once it holds two.
"""

from __future__ import annotations

import json
import logging
import os
from collections import deque
from pathlib import Path
from typing import Optional

from . import writes
from .contract.vocab import JobState
from .contract.plain import ProtocolError, from_dict, to_plain
from .contract.wire import Sample, Snapshot

log = logging.getLogger(__name__)


class HistoryRing:
    def __init__(self, seconds: float = 3600.0, interval_s: float = 1.0, path: Optional[Path] = None) -> None:
        self.seconds = seconds
        self.samples: deque[Sample] = deque(maxlen=max(1, int(seconds / max(interval_s, 1e-3))))
        self.path = Path(path) if path else None
        self._lines_in_file = 0
        self._file = None
        if self.path is not None:
            self._load()

    def _load(self) -> None:
        try:
            with open(self.path, "rb") as f:
                for line in f:
                    self._lines_in_file += 1
                    try:
                        self.samples.append(from_dict(Sample, json.loads(line)))
                    except (ValueError, ProtocolError):
                        continue  # a torn last line after a kill -9: skip it
        except FileNotFoundError:
            pass
        if self.samples:
            newest = self.samples[-1].t
            while self.samples and self.samples[0].t < newest - self.seconds:
                self.samples.popleft()

    def record(self, snap: Snapshot) -> Sample:
        sample = Sample(
            t=round(snap.t, 3),
            gpu_mem_mib=[round(g.mem_used_mib, 1) for g in snap.gpus],
            gpu_util=[g.util_pct for g in snap.gpus],
            job_tokens_per_s={j.name: _tps(j) for j in snap.jobs if j.state in (JobState.RUNNING, JobState.STARTING)},
            job_done={j.name: j.progress.done for j in snap.jobs if j.progress is not None},
            job_tokens={j.name: j.progress.tokens for j in snap.jobs
                        if j.progress is not None and j.progress.tokens is not None},
        )
        self.samples.append(sample)
        if self.path is not None:
            self._append(sample)
        return sample

    def _append(self, sample: Sample) -> None:
        try:
            if self._lines_in_file >= 2 * (self.samples.maxlen or 1):
                self._rewrite()
            if self._file is None:
                self._file = open(self.path, "a", buffering=1)
            self._file.write(json.dumps(to_plain(sample), separators=(",", ":")) + "\n")
            self._lines_in_file += 1
        except OSError as exc:  # a full disk must not stop the agent: an alert instead
            writes.failed(self.path, exc)
        else:
            writes.ok(self.path)

    def _rewrite(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None
        tmp = self.path.with_name(self.path.name + ".tmp")
        with open(tmp, "w") as f:
            for s in self.samples:
                f.write(json.dumps(to_plain(s), separators=(",", ":")) + "\n")
        os.replace(tmp, self.path)
        self._lines_in_file = len(self.samples)

    def since(self, t: float = 0.0) -> list[Sample]:
        return [s for s in self.samples if s.t > t]

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None


def _tps(job):
    if job.progress is not None and job.progress.tokens_per_s is not None:
        return round(job.progress.tokens_per_s, 2)
    if job.engine is not None and job.engine.tokens_per_s is not None:
        return round(job.engine.tokens_per_s, 2)
    return None
