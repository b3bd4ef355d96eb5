"""Small text pieces the tables draw: bars, sparklines and numbers in a few cells."""

from __future__ import annotations

import time
from typing import Optional, Sequence

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
