"""The open files and processes lines: the limits the jobs inherit."""

from __future__ import annotations

import resource
from typing import Callable

from ...contract.ops import Check
from .base import FAIL, OK, WARN, Thresholds


def _limit(value: int) -> str:
    return "unlimited" if value == resource.RLIM_INFINITY else str(value)


def check_limits(getrlimit: Callable[[int], tuple[int, int]] = resource.getrlimit,
                 th: Thresholds = Thresholds()) -> list[Check]:
    out = []
    for name, which, warn, fail, key, why in (
            ("open files", resource.RLIMIT_NOFILE, th.nofile_warn, th.nofile_fail, "nofile", "ulimit -n"),
            ("processes", resource.RLIMIT_NPROC, th.nproc_warn, th.nproc_fail, "nproc", "ulimit -u")):
        soft, hard = getrlimit(which)
        inf = resource.RLIM_INFINITY
        detail = f"soft {_limit(soft)}, hard {_limit(hard)} (the jobs inherit the agent's)"
        if soft == inf or soft >= warn:
            out.append(Check(name, OK, detail))
            continue
        if hard == inf or hard >= warn:
            fix = f"raise the soft limit where the agent starts: {why} {warn} (the hard limit allows it), or " \
                  f"Limit{key.upper()}={warn} in a systemd unit"
        else:
            fix = f"raise the hard limit (as root, /etc/security/limits.conf: USER - {key} {warn}), log in again"
        out.append(Check(name, FAIL if soft < fail else WARN, f"{detail}: under {warn}", fix))
    return out

