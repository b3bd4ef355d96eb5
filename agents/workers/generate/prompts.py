"""Prompts from JSONL, streamed: one object per line, OpenAI chat or ShareGPT.

    {"id": "p1", "messages": [{"role": "user", "content": "..."}, ...]}     OpenAI chat
    {"id": "p1", "conversations": [{"from": "human", "value": "..."}, ...]} ShareGPT
    {"id": "p1", "prompt": "..."}                                           a bare prompt

A line without an ``id`` is known by its 0-based line index (``"41"``), which stays valid as
long as no line is inserted above it. Multi-turn conversations keep the context up to the
last user turn; the answer after it is what gets generated again.

:class:`PromptReader` reads one line at a time and never holds the file. Done prompts are
skipped before any JSON parse when the line starts with ``{"id": ...`` or has no ``"id"``
at all, which makes skipping a million done lines cheap. The conversation shapes themselves
are read by common/chat.py (the audit reads them too).

With ``--part I/N`` the reader yields only the lines of part I (common/parts.py: by the hash
of the id, the done-set's key); the lines of other parts are skipped like done ones, before
any JSON parse where the id can be peeked. A bad line is reported by one part only: the part
of its id when one can be read, else of its 0-based line index.
"""

from __future__ import annotations

from ...contract.kinds import DEFAULT_PROMPT_BYTES

import json
import re
from dataclasses import dataclass
from typing import Any, BinaryIO, Callable, Literal, Optional, Union

from ..common.chat import context_for_last_answer, to_messages
from ..common.idscan import bounded_lines
from ..common.parts import in_part

MAX_PROMPT_BYTES = DEFAULT_PROMPT_BYTES  # the default of --max-prompt-bytes

_ID_AT_START = re.compile(rb'\s*\{\s*"id"\s*:\s*(?:"([^"\\\n]*)"|(-?\d+))\s*[,}]')


class PromptError(ValueError):
    """A prompt line that cannot be used; ``str()`` names the file and line."""


def normalize_id(value: Any, index: int) -> str:
    if value is None:
        return str(index)
    if isinstance(value, str):
        return value
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return json.dumps(value, sort_keys=True)
    return str(value)


@dataclass(slots=True)
class Prompt:
    id: str
    line: int  # 1-based
    offset: int  # byte offset of the line
    messages: list[dict]


class PromptReader:
    """Yields prompts (or PromptErrors) in file order, skipping ids for which ``is_done``
    is true and, given ``part``, the lines of other parts. ``offset``/``line`` tell where
    reading starts (a resume hint)."""

    def __init__(self, path: str, is_done: Callable[[str], bool], offset: int = 0, line: int = 1,
                 max_bytes: Optional[int] = MAX_PROMPT_BYTES, part: Optional[tuple[int, int]] = None) -> None:
        self.path = path
        self.is_done = is_done
        self.part = part
        self.max_bytes = max_bytes
        self._f: Optional[BinaryIO] = open(path, "rb")
        if offset:
            self._f.seek(offset)
        self._lines = bounded_lines(self._f, max_bytes)  # a line over max_bytes is never held whole
        self.offset = offset  # of the next line to read
        self.line = line  # number of the next line to read
        self.skipped = 0  # done lines skipped
        self.other_part = 0  # lines of other parts skipped

    def close(self) -> None:
        if self._f is not None:
            self._f.close()
            self._f = None

    @property
    def exhausted(self) -> bool:
        return self._f is None

    def next(self, budget: int = 10000) -> Union[Prompt, PromptError, None, Literal[True]]:
        """The next prompt to generate, a PromptError for a bad line, None at the end, or
        True when ``budget`` done lines were skipped without finding one (call again; lets
        an event loop breathe)."""
        if self._f is None:
            return None
        is_done, part = self.is_done, self.part
        for _ in range(budget):
            raw, size = next(self._lines, (b"", 0))
            if not size:
                self.close()
                return None
            offset, line = self.offset, self.line
            self.offset += size
            self.line += 1
            if raw is None:
                if part is not None and not in_part(str(line - 1), part):
                    self.other_part += 1
                    continue
                return PromptError(f"{self.path}:{line}: the line is {size:,} bytes, over --max-prompt-bytes "
                                   f"({self.max_bytes:,}); skipped without reading it whole")
            if not raw.strip():
                continue
            m = _ID_AT_START.match(raw)
            peeked: Optional[str] = None  # the id, read without a JSON parse
            if m:
                peeked = m.group(1).decode("utf-8", "surrogateescape") if m.group(1) is not None else \
                    str(int(m.group(2)))
            elif b'"id"' not in raw:
                peeked = str(line - 1)
            if peeked is not None:
                if part is not None and not in_part(peeked, part):
                    self.other_part += 1
                    continue
                if is_done(peeked):
                    self.skipped += 1
                    continue
            try:
                obj = json.loads(raw)
            except ValueError as exc:
                if peeked is None and part is not None and not in_part(str(line - 1), part):
                    self.other_part += 1
                    continue
                return PromptError(f"{self.path}:{line}: not JSON ({exc})")
            try:
                pid = normalize_id(obj.get("id") if isinstance(obj, dict) else None, line - 1)
                if part is not None and not in_part(pid, part):
                    self.other_part += 1
                    continue
                if is_done(pid):
                    self.skipped += 1
                    continue
                messages = context_for_last_answer(to_messages(obj))
            except ValueError as exc:
                return PromptError(f"{self.path}:{line}: {exc}")
            return Prompt(pid, line, offset, messages)
        return True


def line_id(path: str, lineno: int, raw: bytes) -> Optional[str]:
    """The id the reader gives a line (for common/idscan.py): its ``id``, else its 0-based
    index; None for a line that is not a JSON object (the reader reports it)."""
    if b'"id"' not in raw:
        return str(lineno - 1)
    try:
        obj = json.loads(raw)
    except ValueError:
        return None
    return normalize_id(obj.get("id"), lineno - 1) if isinstance(obj, dict) else None
