"""The pilot's prompts: a seeded sample of the prompt file, stratified by length, skipping
prompts already done; and the split of that sample over the concurrency levels."""

from __future__ import annotations

import random
from array import array
from typing import Callable, Optional

from ..generate.prompts import Prompt, PromptError, PromptReader


def scan_lines(path: str) -> tuple[array, array, array]:
    """(byte offset, 1-based line number, byte length) of every non-empty line, streamed,
    without parsing JSON."""
    offsets, lines, lengths = array("q"), array("q"), array("l")
    pos = 0
    with open(path, "rb") as f:
        for no, raw in enumerate(f, 1):
            if raw.strip():
                offsets.append(pos)
                lines.append(no)
                lengths.append(len(raw))
            pos += len(raw)
    return offsets, lines, lengths


def _read_at(path: str, offset: int, line: int, is_done: Callable[[str], bool]):
    """The prompt on the line at ``offset``: a Prompt, a PromptError, or None when done."""
    reader = PromptReader(path, is_done, offset, line)
    try:
        item = reader.next(budget=1)
    finally:
        reader.close()
    if isinstance(item, (Prompt, PromptError)) and (not isinstance(item, Prompt) or item.offset == offset):
        return item
    return None


def sample_prompts(path: str, n: int, is_done: Callable[[str], bool], seed: int = 0,
                   scan: Optional[tuple[array, array, array]] = None) -> tuple[list[Prompt], list[PromptError], int]:
    """``n`` prompts not done yet, one from each of ``n`` strata of equal size after sorting
    the lines by length (so the pilot sees short and long prompts in their proportions),
    in a seeded random order. ``scan``: the file's :func:`scan_lines`, when already read.
    Returns (prompts, bad lines met, non-empty lines in the file)."""
    offsets, lines, lengths = scan or scan_lines(path)
    total = len(offsets)
    rng = random.Random(seed)
    order = sorted(range(total), key=lengths.__getitem__)
    n = min(n, total)
    picked: list[Prompt] = []
    bad: list[PromptError] = []
    seen: set[str] = set()
    for s in range(n):
        lo, hi = s * total // n, (s + 1) * total // n
        stratum = list(range(lo, hi))
        rng.shuffle(stratum)
        for j in stratum[:8]:  # a done or bad line: another of the same stratum
            i = order[j]
            item = _read_at(path, offsets[i], lines[i], lambda pid: is_done(pid) or pid in seen)
            if isinstance(item, PromptError):
                bad.append(item)
            elif item is not None:
                picked.append(item)
                seen.add(item.id)
                break
    rng.shuffle(picked)
    return picked, bad, total


def split_levels(n: int, levels: list[int]) -> list[int]:
    """How many of ``n`` pilot prompts each level starts: in proportion to the level (a level
    of 128 needs more than 128 prompts to keep 128 in flight), at least a few per level."""
    if not levels or n <= 0:
        return [0] * len(levels)
    floor = max(1, min(8, n // (2 * len(levels))))
    if floor * len(levels) >= n:
        base = [n // len(levels)] * len(levels)
        for i in range(n - sum(base)):
            base[-1 - i] += 1
        return base
    rest = n - floor * len(levels)
    weights = sum(levels)
    chunks = [floor + rest * c // weights for c in levels]
    chunks[-1] += n - sum(chunks)
    return chunks
