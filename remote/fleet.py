"""The fleet file: TOML, read with tomllib, validated into nodes and JobSpecs.

Every mistake is reported with the file, the line and what was expected::

    fleet.toml:14: [[jobs]] #2 'gpus': expected a list of GPU indices, got "0,1"

This module reads the file's top: its sections, ``[fleet]`` and ``[defaults]``, and makes the
``Fleet``. Each section has a reader of its own beside it: fleet_nodes ([[nodes]], jumps),
fleet_jobs ([[jobs]], ``after``, engine names), fleet_cluster ([[clusters]]), fleet_envs
([[envs]]), fleet_plans ([[plans]]), fleet_alerting ([alerts], [[notify]], [heartbeat]);
fleet_check checks values and fleet_text finds their lines.
"""

from __future__ import annotations

import math
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

from ..agents.contract.cluster import split_task
from ..agents.contract.envs import EnvSpec
from ..agents.contract.errors import UnknownName
from ..agents.contract.fields import show
from ..agents.contract.jobs import JobSpec
from ..agents.contract.watching import AlertThresholds, HeartbeatConfig, NotifyTarget, WatchSettings
from .fleet_alerting import parse_alerts, parse_heartbeat, parse_notify
from .fleet_check import FleetError, check_host_keys, check_range, check_type, did_you_mean, unknown_key
from .fleet_cluster import parse_clusters
from .fleet_envs import parse_envs
from .fleet_jobs import parse_jobs, resolve_after, resolve_servers
from .fleet_nodes import (LOCAL, NO_JUMP, NODE_FIELDS, Node, cluster_node, jump_host_node, parse_destination,
                          parse_nodes, resolve_jumps)
from .fleet_plans import PlanRef, parse_plans
from .fleet_text import TextLocator, decode

# what importers of this module have always found here (the readers of each section moved beside it)
__all__ = ["LOCAL", "NO_JUMP", "SECTIONS", "FLEET_KEYS", "FLEET_NAME", "S3_PRICE_PER_GB_MONTH", "Fleet", "FleetError",
           "Node", "cluster_node", "jump_host_node", "load_fleet", "local_fleet", "parse_destination", "parse_fleet"]

S3_PRICE_PER_GB_MONTH = 0.023  # dollars per GB-month: S3 Standard's first tier, as `plan extract` assumes


@dataclass(frozen=True)
class Fleet:
    path: Optional[str]
    nodes: list[Node]
    jobs: list[JobSpec] = field(default_factory=list)
    notify: list[NotifyTarget] = field(default_factory=list)  # [[notify]]: where the watcher sends events
    alerts: AlertThresholds = field(default_factory=AlertThresholds)  # [alerts]
    heartbeat: Optional[HeartbeatConfig] = None  # [heartbeat]: the watchers' pings to a push monitor
    plans: list[PlanRef] = field(default_factory=list)  # [[plans]]: the plan.json files `plan compare` weighs
    warnings: tuple[str, ...] = ()  # not a key: what is odd but allowed (a deadline in the past), file:line each
    take_over: bool = False  # not a key: `--take-over`, jobs another fleet file owns on a node become ours
    name: Optional[str] = None  # [fleet] name: the owner of its jobs on the nodes, whatever the file's path
    envs: dict[str, EnvSpec] = field(default_factory=dict)  # [[envs]]: what deploy builds (agents/contract/envs.py)
    # [defaults] s3_price_per_gb_month: what a GB stored in S3 costs a month (a job's S3 inventory)
    s3_price_per_gb_month: float = S3_PRICE_PER_GB_MONTH

    @property
    def source(self) -> str:
        """Where this file is, ``host:/abs/path`` ("" without a fleet file): the owner's key of
        a file with no ``[fleet] name``, and the old key that a named file's owners migrate from."""
        if self.path is None:
            return ""
        import socket
        return f"{socket.gethostname()}:{Path(self.path).resolve()}"

    @property
    def identity(self) -> str:
        """Which fleet this is, for the nodes (agents/jobs/owners.py): its ``[fleet] name``, which a
        copy or a rename keeps; else ``host:/abs/path`` (:attr:`source`); "" without a fleet file."""
        if self.path is None:
            return ""
        return self.name or self.source

    def owns(self, owner: Optional[str]) -> bool:
        """Whether a job a node says belongs to ``owner`` is this fleet's. A console with no
        fleet file shows every job of the node as its own."""
        return not owner or self.path is None or owner in (self.identity, self.source)

    def watch_settings(self, node: Optional[str] = None) -> Optional[WatchSettings]:
        """What ``configure`` carries for the watcher of ``node`` (agents/watch/): None without a
        fleet file, so a bare `gpudeck status` never replaces a node's watch settings with
        nothing. The node's ``price_per_hour`` goes with it: the watcher raises ``idle_paid``
        with no console open."""
        if self.path is None:
            return None
        it = next((n for n in self.nodes if n.name == node), None)
        return WatchSettings(fleet=self.identity, notify=list(self.notify), alerts=self.alerts,
                             heartbeat=self.heartbeat, price_per_hour=it.price_per_hour if it else None,
                             idle_action=it.idle_action if it else None)

    def node(self, name: str) -> Node:
        for n in self.nodes:
            if n.name == name:
                return n
        known = ", ".join(n.name for n in self.nodes)
        raise UnknownName(f"unknown node {name!r}", self.path or "the local fleet", f"its nodes: {known}")

    def job(self, name: str) -> JobSpec:
        """A job by name; a cluster job's task (``extract/7``) is its job."""
        for j in self.jobs:
            if j.name == name:
                return j
        base, index = split_task(name)
        for j in self.jobs:
            if index is not None and j.name == base and j.cluster is not None and index < j.shards:
                return j
        known = ", ".join(j.name for j in self.jobs) or "none"
        raise UnknownName(f"unknown job {name!r}", self.path or "the local fleet", f"its jobs: {known}")

    def envs_on(self, node: str) -> list[EnvSpec]:
        """The envs that ``node``'s jobs name (``python_env``): what deploy builds there."""
        names = {j.python_env for j in self.jobs_on(node) if j.python_env}
        return [e for n, e in self.envs.items() if n in names]

    def jobs_on(self, node: str) -> list[JobSpec]:
        return [j for j in self.jobs if (j.cluster == node if j.cluster is not None else (j.node or LOCAL) == node)]

    @property
    def clusters(self) -> list[Node]:
        return [n for n in self.nodes if n.cluster is not None]


def local_fleet() -> Fleet:
    """With no fleet file: this machine alone, no jobs."""
    return Fleet(path=None, nodes=[Node(name=LOCAL)])


_DEFAULT_KEYS = {"python", "home", "nvml", "interval", "known_hosts", "host_keys", "user", "identity",
                 "connect_timeout", "hello_timeout_s", "venv", "jump", "price_per_hour", "textfile_dir", "idle_action",
                 "s3_price_per_gb_month"}
SECTIONS = ("fleet", "defaults", "nodes", "clusters", "envs", "jobs", "notify", "alerts", "heartbeat", "plans")
FLEET_KEYS = ("name",)  # [fleet]
# a fleet's name: no ':' nor '/', so that no name is taken for an owner of before names, ``host:/path``
FLEET_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")


def load_fleet(path: str | Path) -> Fleet:
    path = str(path)
    try:
        text = Path(path).read_text()
    except OSError as exc:
        raise FleetError(path, None, f"cannot read the fleet file: {exc.strerror or exc}") from None
    return parse_fleet(text, path)


def parse_fleet(text: str, path: str = "<fleet>") -> Fleet:
    doc = decode(text, path)
    loc = TextLocator(text)
    unknown = set(doc) - set(SECTIONS)
    if unknown:
        key = sorted(unknown)[0]
        raise FleetError(path, loc.top(key), f"unknown section {key!r}{did_you_mean(key, SECTIONS)}; expected "
                                             f"[fleet], [defaults], [[nodes]], [[clusters]], [[envs]], [[jobs]], [[notify]], [alerts], "
                                             f"[heartbeat] or [[plans]]")
    name = _parse_fleet_table(doc.get("fleet", {}), path, loc)
    defaults = doc.get("defaults", {})
    if not isinstance(defaults, dict):
        raise FleetError(path, loc.top("defaults"), "'defaults' must be a table: [defaults]")
    for k, v in defaults.items():  # each mistake against [defaults] itself, before any node takes the value
        line = loc.key("defaults", None, k)
        if k not in _DEFAULT_KEYS:
            raise FleetError(path, line, unknown_key("[defaults]", k, sorted(_DEFAULT_KEYS)))
        if k == "s3_price_per_gb_month":  # the fleet's, not a node's
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not (v >= 0 and math.isfinite(v)):
                raise FleetError(path, line, f"[defaults] 's3_price_per_gb_month': expected a finite number at "
                                             f"least 0 (dollars per GB-month), got {show(v, k)}")
            continue
        check_type(path, line, f"[defaults] {k!r}", NODE_FIELDS[k], v)
        check_range(path, line, f"[defaults] {k!r}", k, v)
        if k == "host_keys":
            check_host_keys(path, line, "[defaults] 'host_keys'", v)
    # a mistake in a [[nodes]] or [[jobs]] table is kept and the next table read: every one of
    # them in one run (one per table), with the first of the sections read after them
    mistakes: list[FleetError] = []
    try:
        fleet = _parse_rest(doc, name, defaults, path, loc, mistakes)
    except FleetError as exc:
        mistakes.append(exc)
    if mistakes:
        raise _together(mistakes)
    assert fleet is not None
    return fleet


def _together(mistakes: list[FleetError]) -> FleetError:
    """Several mistakes as one FleetError: ``str()`` a ``file:line: what`` line each, by line."""
    if len(mistakes) == 1:
        return mistakes[0]
    first, *rest = sorted(mistakes, key=lambda e: (e.line is None, e.line or 0))
    return FleetError(first.path, first.line, first.message + "".join(f"\n{e}" for e in rest))


def _parse_rest(doc: dict[str, Any], name: Optional[str], defaults: dict[str, Any], path: str, loc: TextLocator,
                mistakes: list[FleetError]) -> Optional[Fleet]:
    """The fleet after its [defaults]; None when a table had a mistake (in ``mistakes``)."""
    raw_nodes = doc.get("nodes", [])
    nodes = parse_nodes(raw_nodes, defaults, path, loc, mistakes)
    # a node whose table has a mistake is still a name its jobs may give (said once, at the node)
    failed = {raw["name"] for raw in raw_nodes if isinstance(raw, dict) and isinstance(raw.get("name"), str)} \
        if mistakes and isinstance(raw_nodes, list) else set()
    tables = {raw["name"]: i for i, raw in enumerate(raw_nodes) if isinstance(raw, dict)
              and isinstance(raw.get("name"), str)}
    nodes = resolve_jumps(nodes, tables, "jump" in defaults, path, loc)
    clusters = parse_clusters(doc.get("clusters", []), defaults, {n.name for n in nodes}, path, loc)
    nodes += [cluster_node(spec, ssh, path, loc.table("clusters", i)) for i, (spec, ssh) in enumerate(clusters)]
    def fail(line: Optional[int], message: str) -> FleetError:
        return FleetError(path, line, message)

    alerts = parse_alerts(doc.get("alerts", {}), loc, fail)
    notify = parse_notify(doc.get("notify", []), loc, fail)
    heartbeat = parse_heartbeat(doc.get("heartbeat"), loc, fail)
    plans = parse_plans(doc.get("plans", []), os.path.dirname(os.path.abspath(path)), loc, fail)
    warnings: list[str] = []
    jobs = parse_jobs(doc.get("jobs", []), defaults, {n.name for n in nodes if n.cluster is None} | failed, path,
                       loc, alerts.stall_s if "stall_s" in doc.get("alerts", {}) else None, warnings,
                       tuple(n.name for n in nodes if n.cluster is not None), mistakes)
    if mistakes:  # what follows reads the jobs as a whole: the tables' mistakes first
        return None
    jobs = resolve_servers(jobs, {n.name: n for n in nodes}, path, loc)
    jobs = resolve_after(jobs, path, loc)
    envs = parse_envs(doc.get("envs", []), loc, fail)
    for i, j in enumerate(jobs):
        if j.python_env is not None and j.python_env not in envs:
            raise FleetError(path, loc.key("jobs", i, "python_env"),
                             f"[[jobs]] #{i + 1} ({j.name!r}) 'python_env': no [[envs]] table named {j.python_env!r}"
                             f"{did_you_mean(j.python_env, list(envs))}; declared: {', '.join(envs) or 'none'}")
        if j.python_env is not None and j.cluster is not None:
            raise FleetError(path, loc.key("jobs", i, "python_env"),
                             f"[[jobs]] #{i + 1} ({j.name!r}) 'python_env' is for a node's job: deploy does not build "
                             f"envs in a cluster's shared_dir yet; give the job the 'python' of an env built there")
    return Fleet(path=path, nodes=nodes, jobs=jobs, notify=notify, alerts=alerts, heartbeat=heartbeat,
                 plans=plans, warnings=tuple(warnings), name=name, envs=envs,
                 s3_price_per_gb_month=float(defaults.get("s3_price_per_gb_month", S3_PRICE_PER_GB_MONTH)))


def _parse_fleet_table(table: Any, path: str, loc: TextLocator) -> Optional[str]:
    """``[fleet] name``: who owns this file's jobs on the nodes (docs/nodes.md#who-owns-a-nodes-jobs)."""
    if not isinstance(table, dict):
        raise FleetError(path, loc.top("fleet"), "'fleet' must be a table: [fleet]")
    for k in table:
        if k not in FLEET_KEYS:
            raise FleetError(path, loc.key("fleet", None, k), unknown_key("[fleet]", k, FLEET_KEYS))
    name = table.get("name")
    if name is None:
        return None
    if not isinstance(name, str) or not FLEET_NAME.fullmatch(name):
        raise FleetError(path, loc.key("fleet", None, "name"),
                         f"[fleet] 'name': expected letters, digits, '.', '_' or '-' (1 to 64, no ':' nor '/'), "
                         f"got {name!r}")
    return name



