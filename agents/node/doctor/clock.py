"""The clock line: this node's clock against the console's."""

from __future__ import annotations

from ...contract.ops import Check
from .base import FAIL, OK, WARN, Thresholds


def check_clock(console_time: float, now: float, th: Thresholds = Thresholds()) -> Check:
    skew = now - console_time
    way = "ahead of" if skew > 0 else "behind"
    detail = f"this node's clock is {abs(skew):.1f} s {way} the console's (the request's transit counts as ahead)"
    fix = "turn on time sync on the node: timedatectl set-ntp true (or chrony); check the console's clock too"
    if abs(skew) >= th.skew_fail_s:
        return Check("clock", FAIL, detail + ": event times, ETAs and deadlines are off by as much, and S3 "
                                             "refuses requests signed 15 minutes off", fix)
    if abs(skew) >= th.skew_warn_s:
        return Check("clock", WARN, detail + f" (over {th.skew_warn_s:g} s: the nodes' events interleave wrongly)",
                     fix)
    return Check("clock", OK, detail)

