"""Duplicate ids in a worker's input: two lines with one id would be taken for one record
(the second skipped as done), so a run would end "complete" with distinct inputs lost.

:func:`scan_ids` reads the input once, line by line and never more than ``max_line_bytes``
of a line (a longer line is skipped: the worker refuses it on its own), keeping only the set
of ids (short) and the place of the first repeat. Ids are peeked at the start of the line
(``{"id": ...``) without a JSON parse; other lines go through the worker's own ``fallback``.
:func:`cached_scan` keeps the result in ``OUT/ids.json`` under a key of the input's names,
sizes and mtimes, so a resume over unchanged input does not read it again. Given a
``--part I/N``, the scan also counts the lines of that part (parts.py), the part's total.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import BinaryIO, Callable, Iterable, Iterator, Optional

from ...contract.atomic import atomic_write_json
from .parts import in_part

IDS_FILE = "ids.json"
_ID_AT_START = re.compile(rb'\s*\{\s*"id"\s*:\s*("(?:[^"\\\n]|\\.)*"|-?\d+)\s*[,}]')


@dataclass
class IdScan:
    lines: int = 0  # non-empty lines read
    duplicates: int = 0  # lines whose id an earlier line has
    first: Optional[str] = None  # "file:line: id 'x'" of the first repeat
    part_lines: Optional[int] = None  # with a part: the lines of that part ...
    part_duplicates: Optional[int] = None  # ... and those of them that repeat an earlier id

    def to_json(self) -> dict:
        return {"lines": self.lines, "duplicates": self.duplicates, "first": self.first,
                "part_lines": self.part_lines, "part_duplicates": self.part_duplicates}


def bounded_lines(f: BinaryIO, max_bytes: Optional[int]) -> Iterator[tuple[Optional[bytes], int]]:
    """(line, its length in bytes) for each line of ``f``; the line is None when it is longer
    than ``max_bytes`` (its bytes are read past in 1 MiB pieces, never held)."""
    while True:
        raw = f.readline(max_bytes + 1) if max_bytes else f.readline()
        if not raw:
            return
        if not max_bytes or len(raw) <= max_bytes or raw.endswith(b"\n"):
            yield raw, len(raw)
            continue
        n = len(raw)
        while True:
            rest = f.readline(1 << 20)
            n += len(rest)
            if not rest or rest.endswith(b"\n"):
                break
        yield None, n


def peek_id(raw: bytes) -> Optional[str]:
    """The id of a line that starts with it, without parsing the rest; None otherwise."""
    m = _ID_AT_START.match(raw)
    if m is None:
        return None
    tok = m.group(1)
    if tok.startswith(b'"'):
        if b"\\" not in tok:
            return tok[1:-1].decode("utf-8", "surrogateescape")
        try:
            return json.loads(tok)
        except ValueError:
            return None
    return str(int(tok))


def scan_ids(files: Iterable[str], fallback: Callable[[str, int, bytes], Optional[str]],
             max_line_bytes: Optional[int] = None, part: Optional[tuple[int, int]] = None) -> IdScan:
    """Count the lines whose id repeats an earlier one (over all ``files`` in order).
    ``fallback(path, lineno, raw)``: the id of a line :func:`peek_id` cannot read (None: a
    line the worker will refuse anyway). With ``part``: also the lines of that part and their
    repeats (a line without an id is in the part of its 0-based index, as generate's reader
    reports it)."""
    seen: set[str] = set()
    scan = IdScan()
    part_lines = part_duplicates = 0
    for path in files:
        with open(path, "rb") as f:
            for lineno, (raw, _) in enumerate(bounded_lines(f, max_line_bytes), 1):
                if raw is None or not raw.strip():
                    continue
                scan.lines += 1
                rid = peek_id(raw)
                if rid is None:
                    rid = fallback(path, lineno, raw)
                mine = part is not None and in_part(str(lineno - 1) if rid is None else rid, part)
                part_lines += mine
                if rid is None:
                    continue
                if rid in seen:
                    scan.duplicates += 1
                    part_duplicates += mine
                    if scan.first is None:
                        scan.first = f"{path}:{lineno}: id {rid!r}"
                else:
                    seen.add(rid)
    if part is not None:
        scan.part_lines, scan.part_duplicates = part_lines, part_duplicates
    return scan


def cached_scan(out_dir: str, key, scan: Callable[[], IdScan]) -> IdScan:
    """``scan()``, or its result of an earlier run over the same input (``key``)."""
    import os
    path = os.path.join(out_dir, IDS_FILE)
    try:
        with open(path) as f:
            doc = json.load(f)
        if doc.get("key") == key:
            return IdScan(int(doc["lines"]), int(doc["duplicates"]), doc["first"], doc.get("part_lines"),
                          doc.get("part_duplicates"))
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        pass
    result = scan()
    try:
        atomic_write_json(path, {"key": key, **result.to_json()}, fsync=False)
    except OSError:
        pass  # a cache: the next start scans again
    return result


def duplicate_message(scan: IdScan, what: str) -> str:
    """The refusal, naming the first repeat."""
    return (f"{scan.first} repeats an earlier line's id ({scan.duplicates} line(s) of {what} repeat an earlier "
            f"id); ids must be unique: fix the input, or pass --dedupe first to keep the first line of each id")
