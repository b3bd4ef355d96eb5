"""How figures are rounded and spelled: durations, quality counters, significant figures.

Pure functions over plain values; the rows, the widgets and the headless ``status`` share
them, so a figure reads the same wherever it is shown.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Iterable, Optional

if TYPE_CHECKING:
    from ..agents.contract.ops import CopyDiff
    from ..agents.contract.wire import Engine, LaunchResult, Progress

from ..agents.contract.units import human_duration  # noqa: F401 -- the node's spelling, shared with every view

__all__ = ["QUALITY_NAMES", "copy_text", "human_duration", "junk_flags", "quality_flags", "round_eta", "round_figures",
           "round_int", "started_as"]

QUALITY_NAMES = {"empty_answer": "empty", "no_reasoning": "no-reason", "cut_at_max_tokens": "cut",
                 "no_answer": "no-answer", "repetition": "loop", "errors": "err", "error": "err"}
# each quality alert of a generate job (the watcher's, agents/watch/checks.py): the problem of its window
QUALITY_ALERT_PROBLEM = {"quality_cut": "cut_at_max_tokens", "quality_empty": "empty_answer",
                         "quality_no_answer": "no_answer", "quality_repetition": "repetition"}


def quality_flags(quality: dict[str, int]) -> tuple[str, ...]:
    return tuple(f"{QUALITY_NAMES.get(k, k)} {v}" for k, v in sorted(quality.items()) if v)


def junk_flags(kinds: "Iterable[str]", window: Any) -> tuple[str, ...]:
    """The flags of a job's quality alerts (their kinds' values): ``junk cut 100%``, the share
    of its window (a wire.QualityWindow) when it has one."""
    out = []
    for kind in kinds:
        problem = QUALITY_ALERT_PROBLEM.get(kind)
        if problem is None:
            continue
        share = window.share(problem) if window is not None else None
        out.append(f"junk {QUALITY_NAMES[problem]}" + (f" {100 * share:.0f}%" if share is not None else ""))
    return tuple(out)


def round_int(v: Optional[float]) -> Optional[int]:
    return None if v is None else int(round(v))


def round_figures(v: Optional[float]) -> Optional[float]:
    """Three significant figures at most: what a cell can show, so equal rows draw alike."""
    if v is None:
        return None
    a = abs(v)
    if a >= 100:
        return float(round(v))
    if a >= 10:
        return round(v, 1)
    return round(v, 2)


def round_eta(v: Optional[float]) -> Optional[float]:
    """Whole seconds below an hour, whole minutes above."""
    if v is None:
        return None
    return float(round(v)) if v < 3600 else float(round(v / 60) * 60)


def startup_text(p: Optional[Progress], now: float) -> Optional[str]:
    """``compiling 1m 20s``: a job's start-up phase and how long it has been in it (its
    progress.json's ``phase``; agents/contract/stall.py), None when it is not starting up."""
    from ..agents.contract.stall import STARTUP_PHASES

    if p is None or p.phase not in STARTUP_PHASES:
        return None
    if p.phase_since is None:
        return p.phase
    return f"{p.phase} {human_duration(max(0.0, now - p.phase_since))}"


def engine_startup_text(e: Optional[Engine], now: float) -> Optional[str]:
    """``loading 13%, 1m 20s``: an engine's start-up as its own log lines say it (a percentage
    where it prints one; llama-server's ``loading 1m 20s`` without), None once it answers."""
    from ..agents.contract.stall import engine_starting_up

    if e is None or not engine_starting_up(e):
        return None
    took = f" {human_duration(max(0.0, now - e.phase_since))}" if e.phase_since is not None else ""
    if e.phase_pct is None:
        return f"{e.phase}{took}"
    return f"{e.phase} {e.phase_pct:.0f}%" + ("," + took if took else "")


def ready_text(e: Optional[Engine]) -> Optional[str]:
    """``ready in 1m 52s``: an engine's attempt start to its first ready answer, once known."""
    if e is None or e.ready_s is None or e.phase is not None:
        return None
    return f"ready in {human_duration(e.ready_s)}"


def started_as(result: "LaunchResult") -> str:
    """What a launch or relaunch started: the node's process, or on a cluster the scheduler's
    job (gpudeck knows no pid there: Slurm starts the task when it chooses)."""
    return f"Slurm job {result.job_id}" if result.job_id else f"pid {result.pid}"


def copy_text(copy: Optional["CopyDiff"]) -> Optional[str]:
    """How this fleet file's jobs differ from another copy's of its fleet on a node, in one line
    (the node's line in the console, `status`): what the other copy declared that this file
    lacks, what this file adds; None when they do not differ."""
    if copy is None or not (copy.lacks or copy.adds):
        return None
    parts = []  # the jobs first: a line cut at the screen's edge keeps them; the file's path last
    if copy.lacks:
        parts.append(f"{', '.join(copy.lacks)} only in the other copy")
    if copy.adds:
        parts.append(f"{', '.join(copy.adds)} only in this file")
    if copy.replaced:
        parts.append("this file's jobs replaced the other copy's here")
    parts.append(f"the other copy: {copy.declared_from}")
    return "; ".join(parts)

