"""An engine's start-up as the engine itself tells it: how far its loading is, read from its
own log lines, and how long it took to answer.

SGLang prints its weight loading through tqdm on stderr, each update after a carriage return,
in its own bar format (``BAR_FORMAT`` in sglang/srt/utils/common.py; the loader's ``desc`` in
sglang/srt/model_loader/weight_utils.py)::

    Loading safetensors checkpoint shards:  13% Completed | 2/15 [00:05<00:32,  2.50s/it]

and its CUDA graph capture in tqdm's default one (decode_cuda_graph_runner.py)::

    Capturing batches (bs=8 avail_mem=20.31 GB):  40%|████      | 2/5 [00:01<00:01,  1.90it/s]

The newest such line of the job's current attempt (the part of ``job.log`` after the
supervisor's ``=== gpudeck: attempt N of`` header) is its figure: the phase (``loading``,
``capturing``), the percentage, the step (``2/15``), since when the bar runs (the time the log
was written, less the bar's own elapsed time) and when the figure last moved. The log is read
from where the last look stopped; only the start of an attempt, a new agent, or a log cut by
its keeper (agents/logcap.py) reads its tail again.

An engine that prints no figure (llama-server) is ``loading`` while it listens and its
/health answers 503, and ``starting`` while it does not listen yet, since the attempt began.

Once the engine answers, its time to ready is the attempt's start to the first tick that saw
it ready, having seen it not ready; it is kept in the job's ``ready.json``, so the next agent
shows it too. An agent that never saw it unready does not know it and says nothing.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional

from . import writes
from ..contract.atomic import atomic_write_json
from ..contract.vocab import EngineState
from ..contract.wire import Engine

log = logging.getLogger(__name__)

READY_FILE = "ready.json"
TAIL_BYTES = 256 << 10  # what a first look reads of a log: the newest lines, never the whole file
CARRY_BYTES = 4096  # the last line read, kept for the next look (tqdm ends its updates with no newline)

# "<desc>: NN% Completed | n/total [elapsed<" (SGLang's format) or "<desc>: NN%|bar| n/total [elapsed<" (tqdm's)
FIGURE = re.compile(rb"(?P<desc>[A-Za-z][^:\r\n]{0,200}?):\s*(?P<pct>\d{1,3})%(?: Completed \||\|)"
                    rb"[^\r\n]*?(?P<n>\d+)/(?P<total>\d+) \[(?P<elapsed>[\d:]+)<")
PHASES = ((b"load", "loading"), (b"captur", "capturing"))  # a bar's desc (lower case) -> its phase


def attempt_header(attempt: int) -> bytes:
    """The line the supervisor writes at the head of each attempt's part of job.log."""
    return b"=== gpudeck: attempt %d of " % attempt


@dataclass(frozen=True)
class Figure:
    """One progress line: its phase, percentage, step and the bar's elapsed seconds."""

    phase: str
    pct: float
    n: int
    total: int
    elapsed_s: Optional[float] = None

    @property
    def step(self) -> str:
        return f"{self.n}/{self.total}"


def _seconds(text: bytes) -> Optional[float]:
    """tqdm's elapsed time, ``MM:SS`` or ``H:MM:SS``, in seconds."""
    try:
        parts = [int(p) for p in text.split(b":")]
    except ValueError:
        return None
    total = 0
    for p in parts:
        total = total * 60 + p
    return float(total)


def last_figure(text: bytes) -> Optional[Figure]:
    """The newest start-up figure in ``text`` (a part of a log), or None when it holds none."""
    for m in reversed(list(FIGURE.finditer(text))):
        desc = m["desc"].lower()
        phase = next((name for key, name in PHASES if key in desc), None)
        if phase is None:  # another bar (a tokenizer's, a dataset's): not the engine's start-up
            continue
        pct = min(100.0, float(m["pct"]))
        return Figure(phase=phase, pct=pct, n=int(m["n"]), total=int(m["total"]), elapsed_s=_seconds(m["elapsed"]))
    return None


class LogFigures:
    """The newest figure of one attempt in one job's log, reading only what was added since
    the last look."""

    def __init__(self, path: Path, attempt: int) -> None:
        self.path, self.attempt = path, attempt
        self.offset: Optional[int] = None
        self.inode: Optional[int] = None
        self.carry = b""
        self.figure: Optional[Figure] = None
        self.since: Optional[float] = None  # when the current bar began (unix time)
        self.moved_at: Optional[float] = None  # when its figure last changed

    def poll(self) -> Optional[Figure]:
        try:
            st = os.stat(self.path)
        except OSError:
            return self.figure
        first = self.offset is None or st.st_ino != self.inode or st.st_size < self.offset
        if not first and st.st_size == self.offset:
            return self.figure
        start = max(0, st.st_size - TAIL_BYTES) if first else max(self.offset or 0, st.st_size - TAIL_BYTES)
        try:
            with open(self.path, "rb") as f:
                f.seek(start)
                data = f.read(st.st_size - start)
        except OSError:
            return self.figure
        self.inode, self.offset = st.st_ino, start + len(data)
        if first:
            head = data.rfind(attempt_header(self.attempt))
            data = data[head:] if head >= 0 else data
            self.carry = b""
        text = self.carry + data
        cut = max(text.rfind(b"\r"), text.rfind(b"\n"))
        self.carry = text[cut + 1:][-CARRY_BYTES:]
        fig = last_figure(text)
        if fig is not None:
            self._seen(fig, st.st_mtime)
        return self.figure

    def _seen(self, fig: Figure, written_at: float) -> None:
        old = self.figure
        if old is None or old.phase != fig.phase or fig.n < old.n or fig.total != old.total:  # a new bar
            self.since = written_at - (fig.elapsed_s or 0.0)
            self.moved_at = written_at
        elif (fig.n, fig.pct) != (old.n, old.pct):
            self.moved_at = written_at
        self.figure = fig


@dataclass
class _Attempt:
    attempt: int
    started_at: Optional[float]
    figures: LogFigures
    seen_unready: bool = False
    ready_s: Optional[float] = None


class EngineStartups:
    """Each engine job's start-up, added to what its scraper read (:meth:`apply`)."""

    def __init__(self, job_file: Callable[[str, str], Path]) -> None:
        self.job_file = job_file
        self._jobs: dict[str, _Attempt] = {}

    def forget(self, name: str) -> None:
        self._jobs.pop(name, None)

    def apply(self, name: str, attempt: int, started_at: Optional[float], engine: Engine, now: float) -> Engine:
        """``engine`` with its start-up: the phase while it does not answer, the time to ready once it does."""
        cur = self._jobs.get(name)
        if cur is None or cur.attempt != attempt:
            cur = self._jobs[name] = _Attempt(attempt, started_at, LogFigures(self.job_file(name, "job.log"), attempt),
                                              ready_s=self._kept_ready(name, attempt))
        if engine.state.answers:
            if engine.state is EngineState.READY and cur.ready_s is None and cur.seen_unready and started_at:
                cur.ready_s = round(max(0.0, now - started_at), 1)
                self._keep_ready(name, attempt, cur.ready_s)
            return dataclasses.replace(engine, ready_s=cur.ready_s) if cur.ready_s is not None else engine
        cur.seen_unready = True
        fig = cur.figures.poll()
        if fig is not None:
            return dataclasses.replace(engine, phase=fig.phase, phase_since=cur.figures.since, phase_pct=fig.pct,
                                       phase_step=fig.step, phase_moved_at=cur.figures.moved_at)
        # no figure printed: listening and saying 503 is loading (llama-server); not listening yet, starting
        phase = "loading" if engine.state is EngineState.STARTING else "starting"
        return dataclasses.replace(engine, phase=phase, phase_since=started_at)

    def _kept_ready(self, name: str, attempt: int) -> Optional[float]:
        try:
            doc = json.loads(self.job_file(name, READY_FILE).read_text())
        except (OSError, ValueError):
            return None
        ready = doc.get("ready_s") if isinstance(doc, dict) and doc.get("attempt") == attempt else None
        return float(ready) if isinstance(ready, (int, float)) and not isinstance(ready, bool) else None

    def _keep_ready(self, name: str, attempt: int, ready_s: float) -> None:
        path = self.job_file(name, READY_FILE)
        try:
            atomic_write_json(path, {"attempt": attempt, "ready_s": ready_s})
        except OSError as exc:  # a full disk: shown all the same, the failure is an alert
            writes.failed(path, exc)
        else:
            writes.ok(path)
