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
the same: progress.is_useful).

The repetition test: the last :data:`REPEAT_SPAN` (1,000) characters of the reasoning and the
answer (the reasoning first, a line break between), cut into their :data:`REPEAT_N`-character
n-grams (20; one starting at each character, 981 of them); when at most half of those are
distinct, the tail is a stretch of text repeated back to back: a loop whose period is up to
about 490 characters, seen twice or more. Ordinary prose and code have nearly every 20-gram
distinct. A text shorter than :data:`REPEAT_MIN` (200) characters is not judged.
"""

from __future__ import annotations

import collections
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


def useful_pct(useful: Any, of: Any) -> Optional[float]:
    """The share of useful records in percent, or None when none were counted."""
    if not isinstance(useful, int) or not isinstance(of, int) or of <= 0:
        return None
    return 100.0 * useful / of
