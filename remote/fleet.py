"""The fleet file: TOML, read with tomllib, validated into nodes and JobSpecs.

Every mistake is reported with the file, the line and what was expected::

    fleet.toml:14: [[jobs]] #2 'gpus': expected a list of GPU indices, got "0,1"
"""

from __future__ import annotations

import dataclasses
import difflib
import functools
import math
import os
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Optional, cast

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

from ..agents.contract.jobs import KINDS, JobKind, JobSpec, SpecError, completion_marker, shell_command
from ..agents.contract.cluster import RESOURCE_KEYS, ClusterSpec, split_task
from ..agents.contract.envs import EnvSpec
from ..agents.contract.errors import UnknownName
from ..agents.contract.kinds import GenerateOptions, KindOptions, OptionError
from ..agents.contract.names import name_problem
from ..agents.contract.watching import AlertThresholds, HeartbeatConfig, NotifyTarget, WatchSettings

S3_PRICE_PER_GB_MONTH = 0.023  # dollars per GB-month: S3 Standard's first tier, as `plan extract` assumes
from .fleet_check import (FleetError, check_host_keys, check_range, check_type, did_you_mean,
                          unknown_key)
from ..agents.contract.fields import show
from .fleet_cluster import hint_unknown_cluster, parse_clusters, pull_resources
from .fleet_envs import parse_envs
from .fleet_plans import PlanRef, parse_plans
from .fleet_watch import parse_alerts, parse_heartbeat, parse_notify

LOCAL = "local"


@dataclass(frozen=True)
class Node:
    name: str
    host: Optional[str] = None  # None: this machine, reached without SSH
    user: Optional[str] = None
    port: Optional[int] = None
    identity: Optional[str] = None
    python: Optional[str] = None  # the node's interpreter; default: python3 (local: this one)
    home: Optional[str] = None  # state directory on the node; default ~/.gpudeck
    nvml: bool = True
    interval: float = 1.0
    known_hosts: Optional[str] = None
    host_keys: str = "strict"  # strict | accept-new
    connect_timeout: float = 10.0
    hello_timeout_s: float = 15.0  # from the agent's start to its hello (a cold import on NFS takes a while)
    venv: Optional[str] = None  # where `gpudeck deploy` installs gpudeck; default <home>/venv
    simulate_gpus: Optional[str] = None  # the demo's and tests' stand-in GPUs ("4xRTX PRO 6000:96"): never NVML
    jump: Optional[str] = None  # a bastion: a node of the fleet, or [user@]host[:port]; "none": not even ProxyJump
    price_per_hour: Optional[float] = None  # dollars per hour for the node (>= 0); None: not priced, never $0
    textfile_dir: Optional[str] = None  # node_exporter's textfile directory: the agent writes gpudeck.prom there
    # a shell command the node's watcher runs once its every GPU has been idle for [alerts]
    # idle_paid_s with no job alive (its cloud's stop call, say); None: alert only
    idle_action: Optional[str] = None
    spare: bool = False  # a node kept free: jobs with on_node_lost = "move" move here when their node is lost
    via: Optional["Node"] = None  # the bastion's Node, resolved from `jump` (not a fleet-file key)
    # a [[clusters]] table: this "node" is its login (not a [[nodes]] key); not hashed (it holds lists)
    cluster: Optional[ClusterSpec] = field(default=None, compare=False)

    @property
    def local(self) -> bool:
        return self.host is None

    @property
    def agent_venv(self) -> str:
        """The venv `gpudeck deploy` fills on the node; once there, its python runs the agent."""
        return self.venv or f"{(self.home or '~/.gpudeck').rstrip('/')}/venv"


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


_NODE_FIELDS = {f.name: f for f in dataclasses.fields(Node) if f.name not in ("via", "cluster")}
# after_markers, after_endpoints: not keys; _resolve_after fills them from `after`
_JOB_FIELDS = {f.name: f for f in dataclasses.fields(JobSpec) if f.name not in ("after_markers", "after_endpoints")}
_DEFAULT_KEYS = {"python", "home", "nvml", "interval", "known_hosts", "host_keys", "user", "identity",
                 "connect_timeout", "hello_timeout_s", "venv", "jump", "price_per_hour", "textfile_dir", "idle_action",
                 "s3_price_per_gb_month"}
NO_JUMP = "none"
SECTIONS = ("fleet", "defaults", "nodes", "clusters", "envs", "jobs", "notify", "alerts", "heartbeat", "plans")
FLEET_KEYS = ("name",)  # [fleet]
# a fleet's name: no ':' nor '/', so that no name is taken for an owner of before names, ``host:/path``
FLEET_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")


def parse_destination(dest: str) -> tuple[Optional[str], str, Optional[int]]:
    """``[user@]host[:port]`` (ssh's ``-J`` and ProxyJump form; ``[v6addr]:port`` too) as
    (user, host, port); ValueError says what is wrong."""
    rest = dest[len("ssh://"):] if dest.startswith("ssh://") else dest
    user, _, rest = rest.rpartition("@")
    port: Optional[str] = None
    if rest.startswith("["):
        host, _, tail = rest[1:].partition("]")
        if tail:
            if not tail.startswith(":"):
                raise ValueError(f"{dest!r}: expected [user@]host[:port]")
            port = tail[1:]
    elif rest.count(":") == 1:
        host, port = rest.split(":")
    else:
        host = rest
    if not host or any(c.isspace() or c in ",/@" for c in host) or ("@" in dest and not user):
        raise ValueError(f"{dest!r}: expected [user@]host[:port]")
    if port is not None and (not port.isdigit() or not 1 <= int(port) <= 65535):
        raise ValueError(f"{dest!r}: the port must be a number from 1 to 65535")
    return user or None, host, int(port) if port is not None else None


def jump_host_node(dest: str, node: Node) -> Node:
    """A bastion that is not a node of the fleet, for ``node``: ``[user@]host[:port]``, the rest
    from ~/.ssh/config; its host keys are checked with the node's files and policy."""
    user, host, port = parse_destination(dest)
    return Node(name=dest, host=host, user=user, port=port, identity=node.identity, known_hosts=node.known_hosts,
                host_keys=node.host_keys, connect_timeout=node.connect_timeout)


def load_fleet(path: str | Path) -> Fleet:
    path = str(path)
    try:
        text = Path(path).read_text()
    except OSError as exc:
        raise FleetError(path, None, f"cannot read the fleet file: {exc.strerror or exc}") from None
    return parse_fleet(text, path)


def parse_fleet(text: str, path: str = "<fleet>") -> Fleet:
    doc = _decode(text, path)
    loc = _Locator(text)
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
        check_type(path, line, f"[defaults] {k!r}", _NODE_FIELDS[k], v)
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


def _parse_rest(doc: dict[str, Any], name: Optional[str], defaults: dict[str, Any], path: str, loc: "_Locator",
                mistakes: list[FleetError]) -> Optional[Fleet]:
    """The fleet after its [defaults]; None when a table had a mistake (in ``mistakes``)."""
    raw_nodes = doc.get("nodes", [])
    nodes = _parse_nodes(raw_nodes, defaults, path, loc, mistakes)
    # a node whose table has a mistake is still a name its jobs may give (said once, at the node)
    failed = {raw["name"] for raw in raw_nodes if isinstance(raw, dict) and isinstance(raw.get("name"), str)} \
        if mistakes and isinstance(raw_nodes, list) else set()
    tables = {raw["name"]: i for i, raw in enumerate(raw_nodes) if isinstance(raw, dict)
              and isinstance(raw.get("name"), str)}
    nodes = _resolve_jumps(nodes, tables, "jump" in defaults, path, loc)
    clusters = parse_clusters(doc.get("clusters", []), defaults, {n.name for n in nodes}, path, loc)
    nodes += [cluster_node(spec, ssh, path, loc.table("clusters", i)) for i, (spec, ssh) in enumerate(clusters)]
    def fail(line: Optional[int], message: str) -> FleetError:
        return FleetError(path, line, message)

    alerts = parse_alerts(doc.get("alerts", {}), loc, fail)
    notify = parse_notify(doc.get("notify", []), loc, fail)
    heartbeat = parse_heartbeat(doc.get("heartbeat"), loc, fail)
    plans = parse_plans(doc.get("plans", []), os.path.dirname(os.path.abspath(path)), loc, fail)
    warnings: list[str] = []
    jobs = _parse_jobs(doc.get("jobs", []), defaults, {n.name for n in nodes if n.cluster is None} | failed, path,
                       loc, alerts.stall_s if "stall_s" in doc.get("alerts", {}) else None, warnings,
                       tuple(n.name for n in nodes if n.cluster is not None), mistakes)
    if mistakes:  # what follows reads the jobs as a whole: the tables' mistakes first
        return None
    jobs = _resolve_servers(jobs, {n.name: n for n in nodes}, path, loc)
    jobs = _resolve_after(jobs, path, loc)
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


def _parse_fleet_table(table: Any, path: str, loc: "_Locator") -> Optional[str]:
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


def cluster_node(spec: ClusterSpec, ssh: dict[str, Any], path: str, line: Optional[int]) -> Node:
    """The login of a cluster as the node its agent runs on: reached over SSH (or locally),
    its home node-local, its venv in the shared directory."""
    user = host = None
    port = None
    if spec.login != LOCAL:
        try:
            user, host, port = parse_destination(spec.login)
        except ValueError as exc:
            raise FleetError(path, line, f"[[clusters]] {spec.name!r} 'login': {exc}") from None
    return Node(name=spec.name, host=host, user=user, port=port, python=spec.python, home=spec.agent_home,
                venv=spec.venv, simulate_gpus=spec.simulate_gpus, hello_timeout_s=spec.hello_timeout_s, cluster=spec,
                **ssh)


def _decode(text: str, path: str) -> dict[str, Any]:
    try:
        doc: dict[str, Any] = tomllib.loads(text)
        return doc
    except tomllib.TOMLDecodeError as exc:
        m = re.search(r"\(at line (\d+), column (\d+)\)", str(exc))
        line = int(m.group(1)) if m else None
        if line is None and "end of document" in str(exc):  # the last line with something on it
            line = max((i for i, t in enumerate(text.splitlines(), 1) if t.strip()), default=None)
        msg = re.sub(r"\s*\(at (line \d+, column \d+|end of document)\)", "", str(exc))
        raise FleetError(path, line, f"not valid TOML: {msg}") from None


def _parse_nodes(raw_nodes: Any, defaults: dict[str, Any], path: str, loc: "_Locator",
                 mistakes: Optional[list[FleetError]] = None) -> list[Node]:
    """The [[nodes]] tables. ``mistakes``: each table's first mistake is added there and the next
    table read (a file's every mistake in one run); without it the first is raised."""
    nodes: list[Node] = []
    if not isinstance(raw_nodes, list):
        raise FleetError(path, loc.top("nodes"), "'nodes' must be an array of tables: [[nodes]]")
    for i, raw in enumerate(raw_nodes):
        try:
            nodes.append(_parse_node(i, raw, defaults, nodes, path, loc))
        except FleetError as exc:
            if mistakes is None:
                raise
            mistakes.append(exc)
    if not any(n.name == LOCAL for n in nodes):
        nodes.insert(0, Node(name=LOCAL, **{k: v for k, v in defaults.items()
                                            if k in ("home", "nvml", "interval", "hello_timeout_s",
                                                     "price_per_hour")}))
    return nodes


def _parse_node(i: int, raw: Any, defaults: dict[str, Any], nodes: list[Node], path: str, loc: "_Locator") -> Node:
    """One [[nodes]] table; ``nodes``: those read before it."""
    where = f"[[nodes]] #{i + 1}"
    values = {k: v for k, v in defaults.items() if k in _NODE_FIELDS}
    for k, v in raw.items():
        if k not in _NODE_FIELDS and k != "local":
            raise FleetError(path, loc.key("nodes", i, k), unknown_key(where, k, [*_NODE_FIELDS, "local"]))
        values[k] = v
    if "name" not in values:
        raise FleetError(path, loc.table("nodes", i), f"{where} needs a 'name'")
    if _on_this_machine(raw, where, path, loc.key("nodes", i, "local")):
        values["host"] = None
    values.pop("local", None)
    values.setdefault("host", None if values["name"] == LOCAL else values["name"])
    for k, v in values.items():
        line = loc.key("nodes", i, k) or loc.table("nodes", i)
        check_type(path, line, f"{where} {k!r}", _NODE_FIELDS[k], v)
        check_range(path, line, f"{where} {k!r}", k, v)
    if "host_keys" in raw:  # (one from [defaults] was checked there)
        check_host_keys(path, loc.key("nodes", i, "host_keys"), f"{where} 'host_keys'", raw["host_keys"])
    problem = name_problem(values["name"], "a node name")
    if problem:
        raise FleetError(path, loc.key("nodes", i, "name"), f"{where} 'name': {problem}")
    if any(n.name == values["name"] for n in nodes):
        raise FleetError(path, loc.key("nodes", i, "name"), f"{where}: node {values['name']!r} is declared twice")
    return Node(**values)


def _on_this_machine(raw: dict[str, Any], where: str, path: str, line: Optional[int]) -> bool:
    """``local = true``: the node is this machine, its agent a subprocess of the console with
    the node's own home (no SSH; the demo's nodes)."""
    if "local" not in raw:
        return False
    if not isinstance(raw["local"], bool):
        raise FleetError(path, line, f"{where} 'local': expected true or false, got {show(raw['local'], 'local')}")
    if raw["local"] and "host" in raw:
        raise FleetError(path, line, f"{where}: 'local = true' and a 'host' contradict each other (a local node is "
                                     f"reached without SSH)")
    return raw["local"]


def _resolve_jumps(nodes: list[Node], tables: dict[str, int], jump_is_default: bool, path: str,
                   loc: "_Locator") -> list[Node]:
    """Each ``jump`` as the Node of its bastion (``via``): a node of the fleet, else a host.
    A default jump does not apply to the local node nor to the bastion it names.
    ``tables``: each declared node's index among the [[nodes]] tables."""
    by_name = {n.name: n for n in nodes}
    resolved: dict[str, Node] = {}

    def explicit(name: str) -> Optional[int]:
        return loc.keys.get(("nodes", tables[name], "jump")) if name in tables else None

    def fail(node: Node, message: str) -> FleetError:
        line = explicit(node.name) or (loc.key("defaults", None, "jump") if jump_is_default else None)
        return FleetError(path, line, f"node {node.name!r} 'jump': {message}")

    def resolve(node: Node, chain: tuple[str, ...]) -> Node:
        if node.name in resolved:
            return resolved[node.name]
        jump = node.jump
        if jump is not None and not explicit(node.name) and (node.local or jump == node.name):
            out = dataclasses.replace(node, jump=None)  # the default jump is not for this one
        elif jump is None or jump == NO_JUMP:
            out = node
        elif node.local:
            raise fail(node, "the local node is reached without SSH; it cannot jump through a bastion")
        elif jump == node.name:
            raise fail(node, "a node cannot jump through itself")
        elif jump in by_name:
            if by_name[jump].local:
                raise fail(node, f"{jump!r} is the local node, not an SSH host; name a node with a host, "
                                 f"or [user@]host[:port]")
            if jump in chain + (node.name,):
                loop = " -> ".join(chain[chain.index(jump):] + (node.name, jump))
                raise fail(node, f"the jumps go round in a circle ({loop})")
            out = dataclasses.replace(node, via=resolve(by_name[jump], chain + (node.name,)))
        else:
            close = difflib.get_close_matches(jump, list(tables), n=1, cutoff=0.75)
            if close and not any(c in jump for c in ".@:["):
                raise fail(node, f"no node named {jump!r} (did you mean {close[0]!r}?); declared: "
                                 f"{', '.join(tables)}")
            try:
                out = dataclasses.replace(node, via=jump_host_node(jump, node))
            except ValueError as exc:
                raise fail(node, f"neither a node of the fleet nor an SSH destination: {exc}") from None
        resolved[node.name] = out
        return out

    return [resolve(n, ()) for n in nodes]


def _parse_jobs(raw_jobs: Any, defaults: dict[str, Any], names: set[str], path: str,
                loc: "_Locator", stall_s: Optional[float] = None, warnings: Optional[list[str]] = None,
                clusters: tuple[str, ...] = (), mistakes: Optional[list[FleetError]] = None) -> list[JobSpec]:
    """The [[jobs]] tables. ``mistakes``: each table's first mistake is added there and the next
    table read; without it the first is raised."""
    jobs: list[JobSpec] = []
    if not isinstance(raw_jobs, list):
        raise FleetError(path, loc.top("jobs"), "'jobs' must be an array of tables: [[jobs]]")
    for i, raw in enumerate(raw_jobs):
        try:
            jobs.append(_parse_job(raw, i, jobs, defaults, names, path, loc, stall_s, warnings, clusters))
        except FleetError as exc:  # said with the others; the next table is read
            if mistakes is None:
                raise
            mistakes.append(exc)
    return jobs


def _parse_job(raw: Any, i: int, jobs: list[JobSpec], defaults: dict[str, Any], names: set[str], path: str,
               loc: "_Locator", stall_s: Optional[float], warnings: Optional[list[str]],
               clusters: tuple[str, ...]) -> JobSpec:
    """One [[jobs]] table (the ``i``-th), read by the one reader of a job's fields, JobSpec."""
    name = raw.get("name")
    shown_name = (name if len(name) <= 40 else name[:39] + "…") if isinstance(name, str) else None
    where = f"[[jobs]] #{i + 1}" + (f" ({shown_name!r})" if shown_name is not None else "")
    kind = raw.get("kind", JobKind.COMMAND.value)
    if not isinstance(kind, str) or kind not in KINDS:
        hint = did_you_mean(kind, KINDS) if isinstance(kind, str) else ""
        raise FleetError(path, loc.key("jobs", i, "kind"),
                         f"{where} 'kind': expected one of {', '.join(KINDS)}, got {kind!r}{hint}")
    values, options = _job_keys(raw, kind, where, path, functools.partial(loc.key, "jobs", i))
    if isinstance(values.get("command"), str):  # runs with /bin/sh -c (agents/contract/jobs.shell_command)
        try:
            values["command"] = shell_command(values["command"])
        except ValueError as exc:  # an unclosed quote
            raise FleetError(path, loc.key("jobs", i, "command"), f"{where}: {exc}") from None
    if "python" not in values and "python" in defaults and "python_env" not in values:
        values["python"] = defaults["python"]
    if "stall_after_s" not in values and stall_s is not None:  # [alerts] stall_s: every job's default
        values["stall_after_s"] = max(1.0, float(stall_s))
    kind_options = JobKind(kind).options_class
    if kind_options is not None:  # the kind's own keys, read by its dataclass (agents/contract/kinds.py)
        try:
            values["options"] = kind_options.from_fleet(options, where, said=warnings,
                                                        required=not values.get("command"))
        except OptionError as exc:
            raise FleetError(path, loc.key("jobs", i, exc.key) if exc.key else loc.table("jobs", i),
                             str(exc)) from None
    if "name" not in values:
        raise FleetError(path, loc.table("jobs", i), f"{where} needs a 'name'")
    try:  # the one reader of a job's own fields, the node's as well
        spec = JobSpec(**values)
    except SpecError as exc:  # at the key's line where it names one
        if exc.key is not None:
            raise FleetError(path, loc.key("jobs", i, exc.key), f"{where} {exc.said}") from None
        raise FleetError(path, loc.table("jobs", i), f"{where}: {exc}") from None
    if spec.cluster is not None and spec.cluster not in clusters:
        raise FleetError(path, loc.key("jobs", i, "cluster"),
                         f"{where} 'cluster': {hint_unknown_cluster(spec.cluster, clusters)}")
    if spec.node is not None and spec.node not in names:
        raise FleetError(path, loc.key("jobs", i, "node"),
                         f"{where} 'node': no node named {spec.node!r}; declared: {', '.join(sorted(names))}")
    if any(j.name == spec.name for j in jobs):
        raise FleetError(path, loc.key("jobs", i, "name"), f"{where}: job {spec.name!r} is declared twice")
    if warnings is not None and spec.deadline is not None:
        warnings.extend(f"{path}:{loc.key('jobs', i, 'deadline')}: {where} 'deadline': {w}"
                        for w in deadline_warnings(raw.get("deadline"), spec.deadline_t))
    return spec


def _job_keys(raw: dict[str, Any], kind: str, where: str, path: str,
              line: Callable[[str], Optional[int]]) -> tuple[dict[str, Any], dict[str, Any]]:
    """A [[jobs]] table's keys split: the JobSpec's own (and its scheduler ``resources``), and
    the kind's options; a key of neither is refused at its line."""
    option_keys = JobKind(kind).options  # keys of built-in kinds that are not JobSpec fields
    values: dict[str, Any] = {}
    options: dict[str, Any] = {}
    raw, resources = pull_resources(raw, where, path, line)
    if resources is not None:
        values["resources"] = resources
    for k, v in raw.items():
        if k == "deadline" and hasattr(v, "isoformat"):  # a bare TOML date-time: the same as its string
            v = v.isoformat() + ("Z" if getattr(v, "tzinfo", True) is None else "")
        if k in _JOB_FIELDS and k not in ("options", "resources"):  # JobSpec checks them
            values[k] = v
        elif k in option_keys:
            options[k] = v
        else:
            allowed = sorted(set(_JOB_FIELDS) - {"options", "resources"} | option_keys | set(RESOURCE_KEYS))
            raise FleetError(path, line(k), f"{where} has no key {k!r} for kind {kind!r}"
                                            f"{did_you_mean(k, allowed)}; expected one of {', '.join(allowed)}")
    return values, options


def deadline_warnings(raw: Any, t: Optional[float]) -> list[str]:
    """What is odd about a job's deadline that is still a deadline: a bare date, one in the past."""
    import datetime as dt
    import time

    out = []
    if isinstance(raw, dt.date) and not isinstance(raw, dt.datetime) or isinstance(raw, str) and "T" not in raw \
            and ":" not in raw:
        out.append("a date without a time: taken as 00:00 UTC of that day")
    if t is not None and t < time.time():
        out.append(f"{dt.datetime.fromtimestamp(t, dt.timezone.utc):%Y-%m-%d %H:%M} UTC is in the past: "
                   f"every projection passes it")
    return out


def _resolve_servers(jobs: list[JobSpec], nodes: dict[str, Node], path: str, loc: "_Locator") -> list[JobSpec]:
    """``servers`` / ``workers`` may name engine jobs of the fleet: turn names into base URLs
    as seen from the job's own node (127.0.0.1 on the same node, the node's host otherwise)."""
    by_name = {j.name: j for j in jobs}
    out = []
    for i, job in enumerate(jobs):
        resolved: dict[str, list[str]] = {}
        key = "servers" if isinstance(job.options, GenerateOptions) else "workers"
        refs = job.upstreams
        if refs:
            urls = []
            for ref in refs:
                if isinstance(ref, str) and ref.startswith(("http://", "https://")):
                    urls.append(ref.rstrip("/"))
                    continue
                target = by_name.get(ref) if isinstance(ref, str) else None
                if target is None or not target.port:
                    raise FleetError(path, loc.key("jobs", i, key),
                                     f"job {job.name!r} {key!r}: {ref!r} is neither a URL nor an engine job "
                                     f"with a port in this fleet")
                same = (target.node or LOCAL) == (job.node or LOCAL)
                host = target.host if same or target.host not in ("127.0.0.1", "localhost", "0.0.0.0") \
                    else (nodes[target.node or LOCAL].host or "127.0.0.1")
                urls.append(f"http://{host}:{target.port}")
            resolved[key] = urls
        if resolved and job.options is not None:  # resolved holds keys read off job.options
            # KindOptions is a dataclass in each kind, not in its base
            options: KindOptions = dataclasses.replace(cast(Any, job.options), **resolved)
            job = dataclasses.replace(job, options=options)
        out.append(job)
    return out


def _resolve_after(jobs: list[JobSpec], path: str, loc: "_Locator") -> list[JobSpec]:
    """``after``: every job it names is declared; no circle; and each one on another node has a
    completion marker that the job's own node can see (``after_markers``: its
    ``success_marker``, or a built-in worker's ``_SUCCESS`` in its S3 prefix or output
    directory). On a cluster, only jobs of the same cluster: Slurm chains them."""
    index = {j.name: i for i, j in enumerate(jobs)}
    names = list(index)

    def line(i: int) -> Optional[int]:
        return loc.key("jobs", i, "after")

    for i, job in enumerate(jobs):
        for dep in job.after:
            if dep not in index:
                raise FleetError(path, line(i), f"job {job.name!r} 'after': no job named {dep!r}"
                                                f"{did_you_mean(dep, names)}; declared: {', '.join(names)}")
    _refuse_after_circle(jobs, index, path, line)
    out = []
    for i, job in enumerate(jobs):
        markers: dict[str, str] = {}
        endpoints: dict[str, str] = {}  # an s3:// marker in a store of the job's own (its s3_endpoint)
        for dep in job.after:
            d = jobs[index[dep]]
            if job.cluster is not None or d.cluster is not None:
                if job.cluster != d.cluster:
                    raise FleetError(path, line(i), f"job {job.name!r} 'after': {dep!r} runs "
                                                    f"{_where(d)} and {job.name!r} {_where(job)}; a cluster job runs "
                                                    f"after jobs of its own cluster only (Slurm chains them)")
                continue
            if (d.node or LOCAL) == (job.node or LOCAL):
                continue  # the node sees its own job end
            marker = completion_marker(d)
            if marker is None:
                raise FleetError(path, line(i), f"job {job.name!r} 'after': {dep!r} runs {_where(d)} and "
                                                f"{job.name!r} {_where(job)}, which cannot see it end; give {dep!r} "
                                                f"a 'success_marker' on a filesystem both nodes share")
            markers[dep] = marker
            endpoint = d.worker.s3_endpoint if d.worker is not None else None
            if marker.startswith("s3://") and endpoint:
                endpoints[dep] = endpoint
        out.append(dataclasses.replace(job, after_markers=markers, after_endpoints=endpoints) if markers else job)
    return out


def _refuse_after_circle(jobs: list[JobSpec], index: dict[str, int], path: str,
                        line: Callable[[int], Optional[int]]) -> None:
    """FleetError when jobs wait for each other in a circle through ``after``: a depth-first
    walk that meets a job still on its own path."""
    done: set[str] = set()
    for start in jobs:
        stack: list[tuple[str, int]] = [(start.name, 0)]
        on_path = [start.name]
        while stack:
            name, k = stack[-1]
            after = jobs[index[name]].after
            if k == len(after) or name in done:
                stack.pop()
                on_path.pop()
                done.add(name)
                continue
            stack[-1] = (name, k + 1)
            dep = after[k]
            if dep in on_path:
                loop = " -> ".join(on_path[on_path.index(dep):] + [dep])
                raise FleetError(path, line(index[name]), f"job {name!r} 'after': the jobs wait for each other in a "
                                                          f"circle ({loop}); none of them would ever start")
            if dep not in done:
                stack.append((dep, 0))
                on_path.append(dep)


def _where(job: JobSpec) -> str:
    return f"on cluster {job.cluster!r}" if job.cluster is not None else f"on node {job.node or LOCAL!r}"


class _Locator:
    """Finds the line of a table or key in the TOML text (tomllib keeps no positions)."""

    _HEADER = re.compile(r"^\s*(\[\[?)\s*([A-Za-z0-9_.-]+)\s*\]\]?")
    _KEY = re.compile(r"^\s*([A-Za-z0-9_-]+|\"[^\"]*\")\s*=")

    def __init__(self, text: str) -> None:
        self.tables: list[tuple[str, int, int]] = []  # (name, index within array, line)
        self.keys: dict[tuple[str, Optional[int], str], int] = {}
        self.top_keys: dict[str, int] = {}
        counts: dict[str, int] = {}
        current: tuple[str, Optional[int]] = ("", None)
        for n, line in enumerate(text.splitlines(), start=1):
            h = self._HEADER.match(line)
            if h:
                name = h.group(2)
                if h.group(1) == "[[":
                    idx = counts.get(name, 0)
                    counts[name] = idx + 1
                    current = (name, idx)
                else:
                    current = (name, None)
                self.tables.append((name, current[1] if current[1] is not None else -1, n))
                self.top_keys.setdefault(name, n)
                continue
            k = self._KEY.match(line)
            if k:
                key = k.group(1).strip('"')
                self.keys.setdefault((current[0], current[1], key), n)
                if current[0] == "":
                    self.top_keys.setdefault(key, n)

    def table(self, name: str, index: Optional[int]) -> Optional[int]:
        for t, i, line in self.tables:
            if t == name and (index is None or i == index):
                return line
        return None

    def key(self, table: str, index: Optional[int], key: str) -> Optional[int]:
        return self.keys.get((table, index, key)) or self.table(table, index)

    def top(self, key: str) -> Optional[int]:
        return self.top_keys.get(key)
