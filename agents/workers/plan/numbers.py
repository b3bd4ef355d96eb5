"""Numbers on the plan commands' lines: finite, in range, or a usage error that names what is
allowed (never a NaN written into plan.json, never "time: -169s")."""

from __future__ import annotations

import argparse
import math
from typing import Callable


def number(low: float, above: bool = False) -> Callable[[str], float]:
    """An argparse type: a finite number >= ``low`` (> ``low`` when ``above``)."""
    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            value = math.nan
        ok = math.isfinite(value) and (value > low if above else value >= low)
        if not ok:
            raise argparse.ArgumentTypeError(f"expected a finite number {'above' if above else 'at least'} "
                                             f"{low:g}, got {text!r}")
        return value
    return parse
