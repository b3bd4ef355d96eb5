"""The containment line: how a kill finds every process of a job."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

from ...contract.ops import Check
from .base import OK, WARN


def check_containment(mode: str, parent: Optional[Path], forced: bool, mount: Optional[Path]) -> Check:
    if mode == "cgroup":
        return Check("containment", OK, f"cgroup v2: each attempt in a cgroup under {parent}; a kill is "
                                        "cgroup.kill, and no process escapes it")
    escape = "a process that clears its environment escapes a kill's search (the GPU check still names it)"
    if forced:
        return Check("containment", WARN, f"token containment, forced by $GPUDECK_CONTAINMENT=token: {escape}",
                     "unset GPUDECK_CONTAINMENT where the agent starts")
    if mount is None:
        return Check("containment", WARN, f"no cgroup v2 here (cgroup v1, or none): token containment; {escape}",
                     "boot with cgroup v2 (systemd.unified_cgroup_hierarchy=1 on the kernel command line)")
    return Check("containment", WARN, f"cgroup v2 at {mount} is not delegated to this user: token containment; "
                                      f"{escape}",
                 "start the agent in a delegated scope (systemd-run --user --scope -p Delegate=yes), or set "
                 "GPUDECK_CGROUP_PARENT to a cgroup it may write (as root: mkdir /sys/fs/cgroup/gpudeck; "
                 "chown -R USER /sys/fs/cgroup/gpudeck)")

