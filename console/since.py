""""Since you last looked": the fleet's timeline since a moment, said in one line.

:func:`summarize` is a pure function of the events (``rows.EventRow``), the moment and now:
``since 22:10: gen died twice and was restarted; GPU 3 throttled for 40 min (still)``.

- Jobs: how often each died, stalled, was restarted, gave up or finished, counted.
- Conditions (a hot GPU, a throttled one, a low disk, a stalled job, a deadline that will be
  missed, an S3 backlog, servers resting, paid GPUs idle): how long, from the event that raised one to the ``resolved`` with the same key
  (its ``cond``); "(still)" when nothing resolved it yet. A condition that came up before the
  moment and is still on, or cleared after it, counts.
- Problems first (a job that died or gave up, a sick GPU), then the rest; past ``max_chars``
  the line ends with "… and 4 more".
- No news, but the rest of the timeline moved: what it was, counted (``since 22:10: 6
  operator actions and 4 state changes``); the line never says nothing happened when the
  events view lists what did.
- Nothing at all: ``nothing happened since 22:10``.

The rest of the timeline (state changes, launches and kills, notifications sent) is named
only when there is no news: the events view lists it.
"""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Optional, Sequence

from .rows import EventRow

# the keys of one-off happenings, which no ``resolved`` follows: XID errors and deadline
# slips (agents/watch/checks.py), stall restarts (agents/watch/restarts.py)
ONE_OFF_KEYS = ("gpu_health:xid:", "deadline-slip:", "stall-restart:")

# how a job's happenings are said, in this order: (once, n times)
_JOB = {
    "died": ("died", "died {n}"),
    "stalled": ("stalled", "stalled {n}"),
    "restarted": ("was restarted", "was restarted {n}"),
    "gave_up": ("gave up", "gave up {n}"),
    "finished": ("finished", "finished {n}"),
    "deadline": ("slipped its projected finish", "slipped its projected finish {n}"),
    "xid": ("had an XID error", "had {count} XID errors"),
}
_GPU_HEALTH = {"throttle": "throttled", "idle": "idle", "ecc": "had ECC errors", "pages": "needed a reset"}
_CONDITION = {"temperature": "hot", "disk": "low on space", "stalled": "stalled", "deadline": "behind its deadline",
              "node_unreachable": "unreachable", "s3_backlog": "behind on its S3 uploads",
              "servers_resting": "had servers resting", "idle_paid": "idle and paid for",
              "quality": "answering with junk"}
# subjects with these first: the worse, the earlier
_RANK = {"gave_up": 0, "died": 0, "gpu_health": 1, "disk": 1, "node_unreachable": 1, "temperature": 2,
         "stalled": 2, "deadline": 2, "s3_backlog": 2, "servers_resting": 2, "idle_paid": 2, "quality": 2,
         "restarted": 3,
         "finished": 4}
NEWS = frozenset(_RANK)
# every kind of event, counted (the rest of the timeline when there is no news, and what the
# events view lists): (once, many)
_COUNTED = {"died": ("death", "deaths"), "restarted": ("restart", "restarts"), "gave_up": ("gave up", "gave up"),
            "stalled": ("stall", "stalls"), "finished": ("finished", "finished"),
            "gpu_health": ("GPU health alert", "GPU health alerts"), "disk": ("disk alert", "disk alerts"),
            "temperature": ("temperature alert", "temperature alerts"),
            "deadline": ("deadline alert", "deadline alerts"),
            "s3_backlog": ("S3 backlog", "S3 backlogs"), "servers_resting": ("servers resting", "servers resting"),
            "idle_paid": ("idle paid GPU alert", "idle paid GPU alerts"),
            "quality": ("quality alert", "quality alerts"),
            "note": ("operator note", "operator notes"),
            "idle_action": ("idle action run", "idle actions run"),
            "node_unreachable": ("node unreachable", "nodes unreachable"),
            "action": ("operator action", "operator actions"), "state": ("state change", "state changes"),
          "alert": ("alert", "alerts"), "plan_drift": ("plan drift", "plan drifts"),
          "notified": ("notification sent", "notifications sent"),
          "notify_failed": ("failed notification", "failed notifications"),
          "watch": ("watcher start or stop", "watcher starts and stops"), "resolved": ("resolved", "resolved")}


@dataclass
class _Span:
    """A condition's episodes in the window, the seconds known of them, whether one is still on."""

    episodes: int = 0
    seconds: Optional[float] = None
    still: bool = False


@dataclass
class _Subject:
    name: str
    first: float
    rank: int
    counts: Counter[str] = field(default_factory=Counter)  # _JOB key -> times
    spans: dict[str, _Span] = field(default_factory=dict)  # verb -> its episodes

    def count(self, what: str) -> None:
        self.counts[what] += 1

    def span(self, verb: str, seconds: Optional[float], still: bool) -> None:
        s = self.spans.setdefault(verb, _Span())
        s.episodes += 1
        if seconds is not None:
            s.seconds = (s.seconds or 0.0) + max(0.0, seconds)
        s.still = s.still or still

    def phrase(self) -> str:
        parts = []
        for what, (once, many) in _JOB.items():
            n = self.counts.get(what, 0)
            if n:
                parts.append(once if n == 1 else many.format(n=times(n), count=n))
        for verb, n in self.counts.items():  # a condition said once, without its key
            if verb not in _JOB:
                parts.append(verb if n == 1 else f"{verb} {times(n)}")
        for verb, sp in self.spans.items():
            parts.append(_condition(verb, sp.episodes, sp.seconds, sp.still))
        return f"{self.name} {_and(parts)}"


def summarize(events: Sequence[EventRow], since: float, now: float, max_chars: int = 200) -> str:
    """What happened after ``since`` (and what is still going on), in one line."""
    multi = len({e.node for e in events}) > 1
    subjects: dict[str, _Subject] = {}
    open_: dict[tuple[str, str], tuple[float, str, str, int]] = {}  # (node, cond) -> (start, subject, verb, rank)

    def subject(name: str, t: float, rank: int) -> _Subject:
        s = subjects.get(name)
        if s is None:
            s = subjects[name] = _Subject(name, t, rank)
        s.rank, s.first = min(s.rank, rank), min(s.first, t)
        return s

    for e in sorted(events, key=lambda e: (e.t, e.node, e.seq)):
        if e.kind == "resolved" and e.cond:
            start = open_.pop((e.node, e.cond), None)
            if e.t <= since:
                continue
            if start is not None:
                t0, name, verb, rank = start
                subject(name, max(t0, since), rank).span(verb, e.t - t0, still=False)
            elif e.of in NEWS:
                name, verb = _said(e.of, e, multi)
                subject(name, e.t, _RANK[e.of]).span(verb, None, still=False)
            continue
        if e.kind not in NEWS:
            continue
        name, verb = _said(e.kind, e, multi)
        if e.cond and not e.cond.startswith(ONE_OFF_KEYS) and e.kind in ("gpu_health",) + tuple(_CONDITION):
            open_.setdefault((e.node, e.cond), (e.t, name, verb, _RANK[e.kind]))
        elif e.t > since:
            subject(name, e.t, _RANK[e.kind]).count(verb)
    for t0, name, verb, rank in open_.values():
        subject(name, max(t0, since), rank).span(verb, now - t0, still=True)

    when = since_label(since, now)
    if not subjects:
        rest = Counter(e.kind for e in sorted(events, key=lambda e: e.t) if e.t > since)
        if not rest:
            return f"nothing happened since {when}"
        return f"since {when}: " + _and([counted(kind, n) for kind, n in rest.items()])
    phrases = [s.phrase() for s in sorted(subjects.values(), key=lambda s: (s.rank, s.first, s.name))]
    head = f"since {when}: "
    taken = [phrases[0]]
    for p in phrases[1:]:
        left = len(phrases) - len(taken) - 1
        tail = f"; … and {left} more" if left else ""
        if len(head) + len("; ".join(taken + [p])) + len(tail) > max_chars:
            break
        taken.append(p)
    more = len(phrases) - len(taken)
    return head + "; ".join(taken) + (f"; … and {more} more" if more else "")


def _said(kind: str, e: EventRow, multi: bool) -> tuple[str, str]:
    """Who an event is about, and what is said of it: (subject, a _JOB key or a verb)."""
    cond = e.cond or ""
    if kind in ("gpu_health", "temperature") and e.gpu is not None:
        who = f"GPU {e.gpu}" + (f" on {e.node}" if multi else "")
    elif kind == "disk":
        who = f"disk {cond.partition(':')[2] or '?'}" + (f" on {e.node}" if multi else "")
    elif kind == "node_unreachable":
        who = e.node
    elif kind == "idle_paid":  # its key names the GPUs: "idle_paid:0-3"
        who = f"GPU {cond.partition(':')[2] or '?'}" + (f" on {e.node}" if multi else "")
    else:
        who = e.job or e.node
    if kind == "gpu_health":
        part = cond.split(":")[1] if cond.count(":") >= 2 else ""
        return who, "xid" if part == "xid" else _GPU_HEALTH.get(part, "unhealthy")
    if kind == "deadline" and cond.startswith("deadline-slip:"):
        return who, "deadline"
    if kind in _CONDITION and cond and not cond.startswith(ONE_OFF_KEYS):
        return who, _CONDITION[kind]
    return who, kind if kind in _JOB else _CONDITION.get(kind, kind)


def _condition(verb: str, n: int, seconds: Optional[float], still: bool) -> str:
    if n == 1:
        said = f"{verb} for {span(seconds)}" if seconds is not None else verb
        return said + (" (still)" if still else "")
    inside = ", ".join(x for x in (f"{span(seconds)} in all" if seconds is not None else "",
                                   "still" if still else "") if x)
    return f"{verb} {times(n)}" + (f" ({inside})" if inside else "")


def counted(kind: str, n: int) -> str:
    """``6 operator actions``, ``1 state change``: a kind of event of the timeline, counted."""
    once, many = _COUNTED.get(kind, (kind.replace("_", " "), kind.replace("_", " ")))
    return f"{n} {once if n == 1 else many}"


def times(n: int) -> str:
    return "once" if n == 1 else "twice" if n == 2 else f"{n} times"


def span(seconds: float) -> str:
    """40 min, 2 h 05 min, 3 d 4 h."""
    m = int(round(seconds / 60.0))
    if m < 60:
        return f"{max(1, m)} min"
    h, m = divmod(m, 60)
    if h < 48:
        return f"{h} h" + (f" {m:02d} min" if m else "")
    d, h = divmod(h, 24)
    return f"{d} d" + (f" {h} h" if h else "")


def since_label(t: float, now: float) -> str:
    """22:10 today, "Mon 22:10" within the week, else the date."""
    then, today = time.localtime(t), time.localtime(now)
    if then[:3] == today[:3]:
        return time.strftime("%H:%M", then)
    if 0 <= now - t < 6 * 86400:
        return time.strftime("%a %H:%M", then)
    return time.strftime("%Y-%m-%d %H:%M", then)


def _and(parts: list[str]) -> str:
    return parts[0] if len(parts) == 1 else ", ".join(parts[:-1]) + " and " + parts[-1]
