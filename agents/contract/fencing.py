"""Attempt ids and the fencing rule: which of two attempts of one job may write its output.

A job moved off a node that cannot be reached may still be running there. Every attempt of a
worker that writes an output (generate, extract) has an attempt id and writes it beside its
output (``<prefix>/_attempt`` in S3, ``OUT/_attempt`` in a directory) when it starts; a worker
that later reads an id *newer* than its own stops writing and exits (:data:`EXIT_FENCED`).
The console makes a moved job's id (``gpudeck move``) and hands it to the new attempt in
``$GPUDECK_ATTEMPT_ID``; a worker started without one makes its own, named for its node
(``$GPUDECK_NODE``, which the agent sets).

Only a move fences another node. A move's id is marked (``-m`` at its end): the node it names
*holds* the job. An id a worker made itself (a launch, a relaunch, a watcher's restart, a
``plan generate`` pilot) orders after every id before it, so it would fence whatever runs now;
it is therefore refused wherever the output holds a held id of *another node*
(:func:`refusal`): the job was moved there, and only ``gpudeck move`` brings it back. Another
node's unmarked id is no move: a launch there, or a pilot run by hand on the node under its
host's name; a new attempt may take the output over from it. A worker on the holding node
that makes its own id keeps the hold: its id is marked too (:func:`keep_hold`). An attempt
fenced or refused is final: it exits :data:`EXIT_FENCED`, which no restart policy restarts.

An id is ``<unix ms, 15 digits>-<node>-<8 hex>``, and ``-m`` after it for a held one:
zero-padded, so the order of the strings is
the order of the clocks that made them (the node and the random part only break ties). Ids are
compared, not merely told apart, so that a stale attempt restarted on the old node (its
watcher, once the link is back) reads the newer id at its start and stops there, instead of
fencing the new one. The price is a clock: the console's (a move) and the nodes' (a plain
launch) should agree within a few seconds, as NTP keeps them.

This module is the rule alone, shared by the console and the workers: no I/O.
"""

from __future__ import annotations

import os
import re
import secrets
import socket
import time
from typing import Optional

from . import exits

ENV = "GPUDECK_ATTEMPT_ID"  # a moved job's id, set by the console in the job's env
NODE_ENV = "GPUDECK_NODE"  # the node a job runs on (the fleet file's name), set by the agent
FENCE_NAME = "_attempt"  # beside the output: s3://bucket/prefix/_attempt, or OUT/_attempt
EXIT_FENCED = exits.EXIT_FENCED  # a worker that found a newer attempt and stopped (nothing more is written)
FENCED_NOTE = "fenced.json"  # in the job's directory: why its worker stopped fenced (where the job went)

_ID = re.compile(r"^(\d{15})-([A-Za-z0-9_.-]{1,64})-([0-9a-f]{8})(-m)?$")
HELD = "-m"  # the end of a held id: a move's, or a worker's on the node a move placed the job on


class AttemptIdError(ValueError):
    """Not an attempt id: says what was read."""


def new_attempt_id(node: Optional[str] = None, now: Optional[float] = None, moved: bool = False) -> str:
    """A fresh id: the time in ms, the node (default: this host's name) and 8 random hex digits;
    ``moved``: a move's, marked held."""
    t = time.time() if now is None else now
    where = re.sub(r"[^A-Za-z0-9_.-]", "_", node or socket.gethostname() or "node")[:64] or "node"
    return f"{int(t * 1000):015d}-{where}-{secrets.token_hex(4)}" + (HELD if moved else "")


def is_held(attempt_id: Optional[str]) -> bool:
    """Whether ``attempt_id`` is a held one (made by a move, or kept by a worker of the node a
    move placed the job on); False for anything that is not an id."""
    m = _ID.match(attempt_id.strip()) if attempt_id else None
    return m is not None and m.group(4) is not None


def keep_hold(theirs: Optional[str], mine: str) -> str:
    """The id a worker writes: ``mine``, marked held when the output's id is a held one of this
    worker's own node (a restart where the job was moved keeps the job there)."""
    if is_held(mine) or not is_held(theirs) or node_of_id(theirs or "") != node_of_id(mine):
        return mine
    return mine + HELD


def parse_attempt_id(text: str) -> tuple[int, str, str]:
    """(ms, node, random) of an id; AttemptIdError for anything else."""
    m = _ID.match(text.strip())
    if m is None:
        raise AttemptIdError(f"not an attempt id: {text.strip()[:80]!r} (expected <ms>-<node>-<8 hex>)")
    return int(m.group(1)), m.group(2), m.group(3)


def is_newer(theirs: Optional[str], mine: str) -> bool:
    """Whether the id read beside the output (``theirs``) fences the attempt ``mine``: it is a
    valid id, not this one, and orders after it. Nothing there, or garbage, fences nobody
    (the next start writes over it)."""
    if not theirs or theirs.strip() == mine:
        return False
    try:
        return parse_attempt_id(theirs) > parse_attempt_id(mine)
    except AttemptIdError:
        return False


def attempt_id_from_env(node: Optional[str] = None) -> str:
    """``$GPUDECK_ATTEMPT_ID`` when it holds a valid id (a moved job), else a fresh one."""
    return attempt_from_env(node)[0]


def attempt_from_env(node: Optional[str] = None) -> tuple[str, bool]:
    """(id, given): ``$GPUDECK_ATTEMPT_ID`` when it holds a valid id (a moved job: given), else a
    fresh one for ``node`` (default ``$GPUDECK_NODE``, else the host's name)."""
    given = os.environ.get(ENV, "").strip()
    if given:
        parse_attempt_id(given)  # a bad one is the console's bug: say so, never guess
        return given, True
    return new_attempt_id(node or os.environ.get(NODE_ENV) or None), False


def node_of_id(attempt_id: str) -> Optional[str]:
    """The node an id names; None for anything that is not an id."""
    try:
        return parse_attempt_id(attempt_id)[1]
    except AttemptIdError:
        return None


def refusal(theirs: Optional[str], mine: str, given: bool) -> Optional[str]:
    """Why the attempt ``mine`` may not claim an output that holds ``theirs``; None when it may.

    ``given``: ``mine`` was handed over by a move (``$GPUDECK_ATTEMPT_ID``); it is refused only
    by a newer id. An id the worker made itself is refused by a newer one and by a *held* id of
    another node: that node holds the job since a move, and a restart here must not take it back
    with a fresher clock. Another node's unmarked id (a launch there, a pilot run by hand) is no
    move, and refuses nothing that is newer."""
    if is_newer(theirs, mine):
        assert theirs is not None
        return moved_to(theirs)
    if given or not theirs or not is_held(theirs):
        return None
    there = node_of_id(theirs)
    if there is None or there == node_of_id(mine):
        return None
    return moved_to(theirs)


def moved_to(theirs: str) -> str:
    """Where the output went, said as it is: "the job moved to node b at 2026-12-04 10:00:00 UTC
    (attempt id …)" for a held id; "a newer attempt on node b took the output over at …" for an
    id that no move made."""
    try:
        ms, node, _ = parse_attempt_id(theirs)
    except AttemptIdError:
        return f"the output holds attempt {theirs[:80]!r}"
    at = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(ms / 1000.0))
    if not is_held(theirs):
        return f"a newer attempt on node {node} took the output over at {at} (attempt id {theirs})"
    return f"the job moved to node {node} at {at} (attempt id {theirs})"


def attempt_time(attempt_id: str) -> float:
    """When the id was made (unix seconds)."""
    return parse_attempt_id(attempt_id)[0] / 1000.0
