"""What makes a completion junk, and the sliding window of the last completions' problems that
the watcher's quality alerts judge (stdlib only).

The problems of one completion (what :func:`servers.parse_completion` returned), by the name
they are counted under in progress.json's ``quality`` (in total, across attempts) and
``window`` (the last :data:`WINDOW` completions of this attempt):

- ``cut_at_max_tokens``: ``finish_reason`` is ``length``: the server stopped it at
  ``max_tokens`` (a thinking trace cut there is of no use for training);
- ``empty_answer``: not cut, and nothing came back: no answer (``content``) and no reasoning
  (``reasoning_content``), or only whitespace;
- ``no_answer``: not cut, some reasoning (the reasoning parser's ``reasoning_content``) and no
  answer (``content`` empty or whitespace): the model thought and never answered, or the
  server's reasoning parser never found the end of the thinking;
- ``repetition``: the text's tail repeats itself (:func:`repeats`), cut or not (a loop usually
  runs on to ``max_tokens``: such a completion counts under both).

The first three exclude each other; ``repetition`` may come with any of them. A completion
that ended with ``abort`` or ``error`` and an answer counts under none (it is not useful all
the same: :func:`is_useful`).

The same tests judge a finished record read back from a shard (its ``reasoning``, ``answer``
and ``finish_reason`` are the completion's): :class:`Tally` counts a shard's records as the
worker closes it (shards.py writes the figures beside the shard) and as ``gpudeck audit``
reads a generate output, local or in S3 (agents/workers/audit.py), with one definition.

The repetition test: the last :data:`REPEAT_SPAN` (1,000) characters of the reasoning and the
answer (the reasoning first, a line break between), cut into their :data:`REPEAT_N`-character
n-grams (20; one starting at each character, 981 of them); when at most half of those are
distinct, the tail is a stretch of text repeated back to back: a loop whose period is up to
about 490 characters, seen twice or more. Ordinary prose and code have nearly every 20-gram
distinct. A text shorter than :data:`REPEAT_MIN` (200) characters is not judged.
"""

from __future__ import annotations

import collections
import json
from typing import Any, Optional

from ...contract.wire import QualityWindow

CUT, EMPTY, NO_ANSWER, REPETITION = "cut_at_max_tokens", "empty_answer", "no_answer", "repetition"
PROBLEMS = (CUT, EMPTY, NO_ANSWER, REPETITION)
WINDOW = 1000  # completions in the sliding window
REPEAT_N = 20  # characters in an n-gram of the repetition test
REPEAT_SPAN = 1000  # the tail it looks at, in characters
REPEAT_MIN = 200  # a shorter text is not judged


def repeats(text: str, n: int = REPEAT_N, span: int = REPEAT_SPAN, least: int = REPEAT_MIN) -> bool:
    """Whether the tail of ``text`` repeats itself: at most half of the ``n``-character n-grams
    of its last ``span`` characters are distinct (see the module's docstring)."""
    tail = text[-span:]
    if len(tail) < least or len(tail) < 2 * n:
        return False
    grams = len(tail) - n + 1
    return len({tail[i:i + n] for i in range(grams)}) * 2 <= grams


# a finish_reason that makes a record no use: cut at max_tokens, or ended by the server
NOT_USEFUL_FINISH = frozenset({"length", "abort", "error"})


def is_useful(r: dict) -> bool:
    """A completion (what :func:`servers.parse_completion` returned, or a shard's record) worth
    keeping: not cut at max_tokens, not ended by the server, not an empty answer."""
    return r.get("finish_reason") not in NOT_USEFUL_FINISH and bool((r.get("answer") or "").strip())


def problems(r: dict) -> tuple[str, ...]:
    """The quality problems of one completion (names of :data:`PROBLEMS`)."""
    answer = r.get("answer") or ""
    reasoning = r.get("reasoning") or ""
    out: list[str] = []
    if r.get("finish_reason") == "length":
        out.append(CUT)
    elif not answer.strip():
        out.append(NO_ANSWER if reasoning.strip() else EMPTY)
    if repeats(f"{reasoning}\n{answer}" if reasoning else answer):
        out.append(REPETITION)
    return tuple(out)


class Window:
    """The last ``size`` completions' problems: counts kept as completions come and go, and for
    each problem the newest completion's id that had it (the alert's example)."""

    def __init__(self, size: int = WINDOW) -> None:
        self.size = size
        self._items: collections.deque[tuple[str, ...]] = collections.deque()
        self.counts = dict.fromkeys(PROBLEMS, 0)
        self._newest: dict[str, tuple[int, str]] = {}  # problem -> (its completion's number, id)
        self._seq = 0  # completions seen

    def add(self, pid: str, found: tuple[str, ...]) -> None:
        self._seq += 1
        self._items.append(found)
        for p in found:
            self.counts[p] += 1
            self._newest[p] = (self._seq, pid)
        if len(self._items) > self.size:
            for p in self._items.popleft():
                self.counts[p] -= 1

    @property
    def n(self) -> int:
        return len(self._items)

    def example(self, problem: str) -> Optional[str]:
        """The newest id in the window with ``problem``."""
        got = self._newest.get(problem)
        return got[1] if got is not None and got[0] > self._seq - len(self._items) else None

    def document(self) -> QualityWindow:
        examples = {p: e for p in PROBLEMS if self.counts[p] and (e := self.example(p)) is not None}
        return QualityWindow(size=self.size, n=self.n, counts=dict(self.counts), examples=examples)


class Tally:
    """The quality figures of a set of finished records (a shard, a whole output): records,
    useful (:func:`is_useful`) and each problem of :data:`PROBLEMS` (:func:`problems`), with
    the first id that had it."""

    def __init__(self) -> None:
        self.records = 0
        self.useful = 0
        self.counts = dict.fromkeys(PROBLEMS, 0)
        self.examples: dict[str, str] = {}

    def add(self, rid: Any, r: dict, found: Optional[tuple[str, ...]] = None) -> None:
        """One record ``r`` of id ``rid``; ``found``: its problems, when already judged."""
        self.records += 1
        self.useful += is_useful(r)
        for p in problems(r) if found is None else found:
            self.counts[p] += 1
            self.examples.setdefault(p, str(rid))

    def add_record(self, r: Any) -> bool:
        """A record read back from a shard (a parsed JSON line); False, counting nothing, for
        a line that is not one (no object, no ``id``)."""
        if not isinstance(r, dict) or "id" not in r:
            return False
        self.add(r["id"], r)
        return True

    def add_jsonl(self, data: bytes) -> int:
        """Every complete record of a JSONL shard's bytes (a half-written last line, which an
        open shard may end with, and lines that are not records are skipped: their count is
        returned)."""
        skipped = 0
        end = data.rfind(b"\n") + 1
        for raw in data[:end].split(b"\n")[:-1]:
            try:
                ok = self.add_record(json.loads(raw))
            except ValueError:
                ok = False
            skipped += not ok and bool(raw.strip())
        return skipped

    def merge(self, other: "Tally") -> None:
        self.records += other.records
        self.useful += other.useful
        for p in PROBLEMS:
            self.counts[p] += other.counts[p]
            if p in other.examples:
                self.examples.setdefault(p, other.examples[p])

    def document(self) -> dict[str, Any]:
        """The figures as JSON: ``records``, ``useful``, ``useful_pct`` (None of no records),
        ``problems`` (counts) and ``examples`` (the first id of each problem found)."""
        pct = useful_pct(self.useful, self.records)
        return {"records": self.records, "useful": self.useful,
                "useful_pct": round(pct, 2) if pct is not None else None, "problems": dict(self.counts),
                "examples": {p: self.examples[p] for p in PROBLEMS if p in self.examples}}

    @classmethod
    def from_document(cls, doc: Any) -> Optional["Tally"]:
        """The tally a :meth:`document` holds; None for anything else."""
        try:
            t = cls()
            t.records, t.useful = int(doc["records"]), int(doc["useful"])
            t.counts = {p: int(doc["problems"][p]) for p in PROBLEMS}
            t.examples = {p: str(v) for p, v in (doc.get("examples") or {}).items() if p in PROBLEMS}
            return t
        except (KeyError, TypeError, ValueError, AttributeError):
            return None


def useful_pct(useful: Any, of: Any) -> Optional[float]:
    """The share of useful records in percent, or None when none were counted."""
    if not isinstance(useful, int) or not isinstance(of, int) or of <= 0:
        return None
    return 100.0 * useful / of
