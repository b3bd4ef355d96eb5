"""Small text pieces the tables draw: bars, sparklines and numbers in a few cells."""

from __future__ import annotations

import time
from typing import Optional, Sequence

from rich.cells import cell_len
from rich.style import Style
from rich.text import Text

SPARK_CHARS = "▁▂▃▄▅▆▇█"


Frag = tuple[str, Optional[Style]]


def bar(fraction: Optional[float], width: int, fill: Style, empty: Style) -> list[Frag]:
    """A horizontal bar of ``width`` cells, in half-cell steps, as (text, style) fragments."""
    if width <= 0:
        return []
    if fraction is None:
        return [("╌" * width, empty)]
    halves = int(round(max(0.0, min(1.0, fraction)) * width * 2))
    full, half = divmod(halves, 2)
    out: list[Frag] = [("━" * full + ("╸" if half else ""), fill)]
    rest = width - full - half
    if rest:
        out.append(("━" * rest, empty))
    return out


def as_text(frags: list[Frag]) -> Text:
    text = Text(no_wrap=True, end="")
    for t, style in frags:
        text.append(t, style)
    return text


def sparkline(values: Sequence[Optional[float]], top: Optional[float] = None) -> str:
    """One character per value, scaled to the largest (or ``top``); a gap is a space."""
    peak = top if top is not None else max((v for v in values if v is not None), default=0.0)
    if not peak or peak <= 0:
        return "".join(" " if v is None else SPARK_CHARS[0] for v in values)
    last = len(SPARK_CHARS) - 1
    return "".join(" " if v is None else SPARK_CHARS[max(0, min(last, int(v / peak * last + 0.5)))]
                   for v in values)


def rate(v: Optional[float]) -> str:
    """1,234 / 56.7 / 0.42; '-' when unknown."""
    if v is None:
        return "-"
    a = abs(v)
    if a >= 100:
        return f"{v:,.0f}"
    if a >= 10:
        return f"{v:.1f}"
    return f"{v:.2f}"


def count(n: Optional[int]) -> str:
    """12,345 / 914.0k / 1.23M; '-' when unknown."""
    if n is None:
        return "-"
    if n < 100_000:
        return f"{n:,}"
    if n < 10_000_000:
        return f"{n / 1000:.1f}k"
    return f"{n / 1e6:.2f}M"


def clock_time(t: Optional[float]) -> str:
    """A wall-clock time in the operator's zone: 14:03:11."""
    return "-" if t is None else time.strftime("%H:%M:%S", time.localtime(t))


def fit(text: str, width: int) -> str:
    """Cut ``text`` to ``width`` cells with an ellipsis."""
    return text if len(text) <= width else text[: max(0, width - 1)] + "…"


BLOCKS = " ▁▂▃▄▅▆▇█"


def column_chart(values: Sequence[Optional[float]], height: int, top: Optional[float] = None) -> list[str]:
    """``values`` as columns of blocks ``height`` rows tall, scaled to ``top`` (or the largest),
    the top row first; a gap (None) is an empty column."""
    peak = top if top is not None else max((v for v in values if v is not None), default=0.0)
    steps = [None if v is None else (0 if not peak or peak <= 0 else int(max(0.0, min(1.0, v / peak)) * height * 8 + 0.5))
             for v in values]
    rows = []
    for r in range(height - 1, -1, -1):
        low = r * 8
        rows.append("".join(" " if s is None else BLOCKS[max(0, min(8, s - low))] for s in steps))
    return rows


def resample(values: Sequence[Optional[float]], width: int) -> list[Optional[float]]:
    """``values`` stretched or squeezed to ``width`` columns (a column is the mean of its values)."""
    n = len(values)
    if n == 0 or width <= 0:
        return [None] * max(0, width)
    out: list[Optional[float]] = []
    for c in range(width):
        a, b = c * n // width, max(c * n // width + 1, (c + 1) * n // width)
        got = [v for v in values[a:b] if v is not None]
        out.append(sum(got) / len(got) if got else None)
    return out


# ---------------------------------------------------------------- shrinking by rules, never mid-word


def words_fit(text: str, width: int) -> str:
    """``text`` in ``width`` cells, cut only between words: the words that fit and an ellipsis
    (``waiting for…``); a first word longer than the cell is cut, there being no other way."""
    if cell_len(text) <= width:
        return text
    words = text.split(" ")
    for n in range(len(words) - 1, 0, -1):
        head = " ".join(words[:n]).rstrip(",;:")
        if cell_len(head) + 1 <= width:
            return head + "…"
    return fit(text, width)


def phrases_fit(phrases: Sequence[Frag], width: int, sep: str = " ") -> list[Frag]:
    """Phrases (each flag, with its style) in ``width`` cells: the whole ones that fit, the next cut
    between its words, then ``+N`` for those left out; never a word cut in two."""
    out: list[Frag] = []
    used = 0
    for i, (text, style) in enumerate(phrases):
        gap = sep if out else ""
        left = len(phrases) - i - 1
        more = f" +{left}" if left else ""
        if used + cell_len(gap + text) + (cell_len(more) if left else 0) <= width or \
                (not left and used + cell_len(gap + text) <= width):
            out.append((gap + text, style))
            used += cell_len(gap + text)
            continue
        room = width - used - cell_len(gap) - cell_len(f" +{left}" if left else "")
        words = text.split(" ")
        if room >= 2 and len(words) > 1 and cell_len(words[0]) + 1 <= room:
            out.append((gap + words_fit(text, room), style))
            used += cell_len(out[-1][0])
            if left:
                out.append((f" +{left}", None))
            return out
        rest = len(phrases) - i
        tail = f"{gap}+{rest}"
        if used + cell_len(tail) <= width or not out:
            out.append((tail if out else f"+{rest}" if cell_len(f"+{rest}") < cell_len(text) else text, None))
        return out
    return out


def short_gpu_name(name: str) -> str:
    """A GPU's name as a cell says it: the vendor's prefix off, a simulated GPU ``B200·sim``."""
    host, sep, model = name.rpartition(": ")  # a cluster's GPU: "node-3: NVIDIA H100"
    model = model.removeprefix("NVIDIA ").replace(" (simulated)", "·sim")
    return f"{host}{sep}{model}"


def gpu_name_fit(name: str, width: int) -> str:
    """``short_gpu_name`` in ``width`` cells: words dropped from the end of the model (its edition,
    its memory), never cut inside one; the ``·sim`` mark kept."""
    short = short_gpu_name(name)
    if cell_len(short) <= width:
        return short
    mark = "·sim" if short.endswith("·sim") else ""
    body = short[: len(short) - len(mark)] if mark else short
    words = body.split(" ")
    for n in range(len(words) - 1, 0, -1):
        head = " ".join(words[:n]).rstrip(":")
        if cell_len(head + mark) <= width:
            return head + mark
    return fit(short, width)


def gpu_list(gpus: Sequence[int], width: int) -> str:
    """A job's GPUs in ``width`` cells: ``0,1``, runs as ``0-7``, else their count ``×8``."""
    if not gpus:
        return "-"
    plain = ",".join(map(str, gpus))
    if cell_len(plain) <= width:
        return plain
    runs: list[str] = []
    ordered = sorted(gpus)
    start = prev = ordered[0]
    for g in [*ordered[1:], None]:
        if g is not None and g == prev + 1:
            prev = g
            continue
        runs.append(str(start) if start == prev else f"{start}-{prev}")
        if g is not None:
            start = prev = g
    ranged = ",".join(runs)
    return ranged if cell_len(ranged) <= width else f"×{len(gpus)}"
