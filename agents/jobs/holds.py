"""What a kill must never reach: the processes that hold the node.

A kill by pid signals its one process; an adopted job's kill signals its whole process group
when it leads one, else its process tree (records.group_members). Either would take the node
down with it when what it reaches holds

- pid 1 (init): its tree is every process on the node;
- a gpudeck agent (the node's agent, its watcher, a console's relay: ``python -m
  gpudeck.agents``): the kill would cut every console off the node and stop the watching.
  The agent's ancestors (the sshd session it runs in, the console's own process) hold it in
  their trees;
- an sshd session: someone's login, perhaps the one the operator works through;
- a process of another job: that job would die unasked, and unverified.

So ``adopt`` and ``kill --pid`` are refused for such a process, before anything is read into
a job or signalled (HoldsTheNode, exit 8), and an adopted job whose members came to hold one
of them since is not killed either. What the process holds on the GPUs plays no part: a
process that holds no GPU may still be adopted.

One pass over /proc (:func:`process_table`): adopt and kill are rare, and the tree, the group
and the agents' ancestors all come from the same reading."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Callable, Iterable, Optional

import psutil


@dataclass(frozen=True)
class Proc:
    pid: int
    ppid: int
    pgid: Optional[int]
    name: str
    cmdline: tuple[str, ...]

    @property
    def is_agent(self) -> bool:
        """``python -m gpudeck.agents ...``: an agent, a watcher or a relay (not a worker module
        of the package, ``gpudeck.agents.workers...``, which jobs run)."""
        args = self.cmdline
        return any(a == "-m" and b == "gpudeck.agents" for a, b in zip(args, args[1:]))

    @property
    def is_sshd(self) -> bool:
        """An sshd process: the listener, or a session (``sshd``, OpenSSH 9.8's ``sshd-session``)."""
        return self.name == "sshd" or self.name.startswith("sshd-")

    def shown(self) -> str:
        text = " ".join(self.cmdline) or self.name or "?"
        return text if len(text) <= 40 else text[:39] + "…"


def process_table() -> dict[int, Proc]:
    """Every live process (zombies left out: they hold nothing and cannot be signalled)."""
    out: dict[int, Proc] = {}
    for p in psutil.process_iter(["ppid", "name", "cmdline", "status"]):
        info = p.info
        if info["status"] == psutil.STATUS_ZOMBIE:
            continue
        try:
            pgid: Optional[int] = os.getpgid(p.pid)
        except OSError:
            continue  # ended meanwhile
        out[p.pid] = Proc(pid=p.pid, ppid=info["ppid"] or 0, pgid=pgid, name=info["name"] or "",
                          cmdline=tuple(info["cmdline"] or ()))
    return out


def descendants(pid: int, table: dict[int, Proc]) -> set[int]:
    children: dict[int, list[int]] = {}
    for p in table.values():
        children.setdefault(p.ppid, []).append(p.pid)
    out: set[int] = set()
    todo = [pid]
    while todo:
        for c in children.get(todo.pop(), ()):
            if c not in out and c != pid:
                out.add(c)
                todo.append(c)
    return out


def ancestors(pid: int, table: dict[int, Proc]) -> list[int]:
    out: list[int] = []
    p = table.get(pid)
    while p is not None and p.ppid and p.ppid not in out:
        out.append(p.ppid)
        p = table.get(p.ppid)
    return out


class Reach:
    """What killing ``pid`` could reach: itself, its process tree and its process group."""

    def __init__(self, pid: int, table: dict[int, Proc]) -> None:
        self.pid = pid
        self.tree = descendants(pid, table)
        me = table.get(pid)
        self.group = {p.pid for p in table.values() if me is not None and me.pgid and p.pgid == me.pgid} - {pid}
        self.pgid = me.pgid if me is not None else None

    def all(self) -> set[int]:
        return {self.pid} | self.tree | self.group

    def how(self, other: int) -> str:
        """How ``other`` is reached, in words that follow 'pid N ...'."""
        if other == self.pid:
            return "is"
        if other in self.tree:
            return "has in its process tree"
        return f"has in its process group ({self.pgid})"


def holds_the_node(pid: int, node: str, agent_pid: int, agent_role: str,
                   owner_of: Callable[[int], Optional[str]], own_job: Optional[str] = None,
                   members: Optional[Iterable[int]] = None) -> Optional[str]:
    """Why a kill of ``pid`` would take the node down (see the module's docstring), or None.
    ``members``: what the kill signals when the caller knows it (an adopted job's members),
    else ``pid``'s tree and group. ``own_job``: processes of that job are the kill's own."""
    where = f"pid {pid} on node {node}"
    if pid == 1:
        return f"{where} is init: its process tree is every process on the node"
    table = process_table()
    reach = Reach(pid, table)
    reached = reach.all() | set(members or ())

    def how(other: int) -> str:
        return reach.how(other) if other in reach.all() else "has among its members"

    if 1 in reached:
        return f"{where} {how(1)} init (pid 1): a kill would reach every process on the node"
    agents = {p.pid for p in table.values() if p.is_agent} | {agent_pid}
    for a in sorted(agents, key=lambda a: a != agent_pid):  # the node's own agent first
        what = (f"the node's {agent_role} (pid {a})" if a == agent_pid
                else f"a gpudeck agent (pid {a}: {table[a].shown()})")
        if pid in ancestors(a, table):
            return f"{where} is an ancestor of {what}: its kill would take the agent down"
        if a in reached:
            return f"{where} {how(a)} {what}: its kill would cut every console off the node"
    for q in sorted(reached):
        p = table.get(q)
        if p is not None and p.is_sshd:
            return f"{where} {how(q)} an sshd session (pid {q}: {p.shown()}): its kill would end someone's login"
    for q in sorted(reached):
        owner = owner_of(q)
        if owner is not None and owner != own_job:
            return f"{where} {how(q)} pid {q} of job {owner!r}: kill that job by its name"
    return None
