"""The fleet file's nodes: the ``Node`` a ``[[nodes]]`` table (or a ``[[clusters]]`` login)
becomes, its ``jump`` resolved to the bastion's Node, and SSH destinations (remote/fleet.py reads
the rest)."""

from __future__ import annotations

import dataclasses
import difflib
from dataclasses import dataclass, field
from typing import Any, Optional

from ..agents.contract.cluster import ClusterSpec
from ..agents.contract.fields import show
from ..agents.contract.names import name_problem
from .fleet_check import FleetError, check_host_keys, check_range, check_type, unknown_key
from .fleet_text import TextLocator

LOCAL = "local"
NO_JUMP = "none"


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


NODE_FIELDS = {f.name: f for f in dataclasses.fields(Node) if f.name not in ("via", "cluster")}


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



def parse_nodes(raw_nodes: Any, defaults: dict[str, Any], path: str, loc: TextLocator,
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


def _parse_node(i: int, raw: Any, defaults: dict[str, Any], nodes: list[Node], path: str, loc: TextLocator) -> Node:
    """One [[nodes]] table; ``nodes``: those read before it."""
    where = f"[[nodes]] #{i + 1}"
    values = {k: v for k, v in defaults.items() if k in NODE_FIELDS}
    for k, v in raw.items():
        if k not in NODE_FIELDS and k != "local":
            raise FleetError(path, loc.key("nodes", i, k), unknown_key(where, k, [*NODE_FIELDS, "local"]))
        values[k] = v
    if "name" not in values:
        raise FleetError(path, loc.table("nodes", i), f"{where} needs a 'name'")
    if _on_this_machine(raw, where, path, loc.key("nodes", i, "local")):
        values["host"] = None
    values.pop("local", None)
    values.setdefault("host", None if values["name"] == LOCAL else values["name"])
    for k, v in values.items():
        line = loc.key("nodes", i, k) or loc.table("nodes", i)
        check_type(path, line, f"{where} {k!r}", NODE_FIELDS[k], v)
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


def resolve_jumps(nodes: list[Node], tables: dict[str, int], jump_is_default: bool, path: str,
                   loc: TextLocator) -> list[Node]:
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

