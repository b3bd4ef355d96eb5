"""The fleet file's ``[[clusters]]`` and what a job on a cluster asks for (remote/fleet.py reads
the rest). A cluster is reached as a node is: its ``login`` is an SSH destination (or
``"local"``), and the agent there runs in the scheduler's mode (agents/cluster/)."""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Optional, Sequence

from ..agents.contract.names import name_problem
from ..agents.contract.cluster import MIN_POLL_S, RESOURCE_KEYS, ClusterSpec, TaskResources
from .fleet_check import FleetError, check_host_keys, check_range, check_type, did_you_mean, unknown_key
from ..agents.contract.fields import show
from .fleet_text import Locator

_SPEC_FIELDS = {f.name: f for f in dataclasses.fields(ClusterSpec)}
SSH_KEYS = ("identity", "known_hosts", "host_keys", "connect_timeout")  # as for [[nodes]], from [defaults] too
CLUSTER_KEYS = (*_SPEC_FIELDS, *SSH_KEYS)
_RES_FIELDS = {f.name: f for f in dataclasses.fields(TaskResources)}
NOT_ON_CLUSTER = ("node", "host", "port", "tp", "dp")  # a node's keys that mean nothing to a scheduler


def parse_clusters(raw: Any, defaults: dict[str, Any], node_names: set[str], path: str, loc: Locator
                   ) -> list[tuple[ClusterSpec, dict[str, Any]]]:
    """Each ``[[clusters]]`` table: its spec, and its SSH settings (``identity``...) for the login."""
    if not isinstance(raw, list):
        raise FleetError(path, loc.top("clusters"), "'clusters' must be an array of tables: [[clusters]]")
    out: list[tuple[ClusterSpec, dict[str, Any]]] = []
    for i, table in enumerate(raw):
        where = f"[[clusters]] #{i + 1}"

        def line(key: Optional[str] = None) -> Optional[int]:
            return loc.key("clusters", i, key) if key else loc.table("clusters", i)

        ssh = {k: v for k, v in defaults.items() if k in SSH_KEYS}
        values: dict[str, Any] = {}
        for k, v in table.items():
            if k not in CLUSTER_KEYS:
                raise FleetError(path, line(k), unknown_key(where, k, CLUSTER_KEYS))
            if k in SSH_KEYS:
                if k == "host_keys":
                    check_host_keys(path, line(k), f"{where} 'host_keys'", v)
                elif k == "connect_timeout":
                    if isinstance(v, bool) or not isinstance(v, (int, float)):
                        raise FleetError(path, line(k), f"{where} 'connect_timeout': expected a number, got "
                                                        f"{show(v, k)}")
                    check_range(path, line(k), f"{where} 'connect_timeout'", k, v)
                elif not isinstance(v, str):
                    raise FleetError(path, line(k), f"{where} {k!r}: expected a string, got {show(v, k)}")
                ssh[k] = v
                continue
            check_type(path, line(k), f"{where} {k!r}", _SPEC_FIELDS[k], v)
            values[k] = v
        for key in ("name", "shared_dir"):
            if key not in values:
                raise FleetError(path, line(), f"{where} needs a {key!r}" + (
                    " (a directory on the shared filesystem that every compute node sees)" if key == "shared_dir"
                    else ""))
        name = values["name"]
        where = f"[[clusters]] {name!r}"
        problem = name_problem(name, "a cluster name")
        if problem:
            raise FleetError(path, line("name"), f"{where} 'name': {problem}")
        if name in node_names or any(c.name == name for c, _ in out):
            raise FleetError(path, line("name"), f"{where}: the name is already taken by a node or a cluster")
        if "kind" in values and values["kind"] != "slurm":
            raise FleetError(path, line("kind"), f"{where} 'kind': expected \"slurm\", got {show(values['kind'])}")
        poll = values.get("poll_s")
        if poll is not None and (poll != poll or poll < MIN_POLL_S):
            raise FleetError(path, line("poll_s"), f"{where} 'poll_s': at least {MIN_POLL_S:g} seconds (one squeue "
                                                   f"per poll is shared by every console), got {poll!r}")
        timeout = values.get("hello_timeout_s")
        if timeout is not None and not 0 < timeout <= 3600:
            raise FleetError(path, line("hello_timeout_s"), f"{where} 'hello_timeout_s': expected seconds from "
                                                            f"0 to 3600, got {timeout!r}")
        if not str(values["shared_dir"]).startswith(("/", "~")):
            raise FleetError(path, line("shared_dir"), f"{where} 'shared_dir': expected an absolute path on the "
                                                       f"shared filesystem, got {values['shared_dir']!r}")
        out.append((ClusterSpec(**values), ssh))
    return out


def pull_resources(raw: dict[str, Any], where: str, path: str, line: Callable[[str], Optional[int]]
                   ) -> tuple[dict[str, Any], Optional[TaskResources]]:
    """A [[jobs]] table with a ``cluster``: its scheduler keys taken out as TaskResources, the
    rest left for the job's own keys. Without a ``cluster``: the table as it is, None."""
    if "cluster" not in raw:
        for key in RESOURCE_KEYS:
            if key in raw and key != "gpus":
                raise FleetError(path, line(key), f"{where} {key!r}: a scheduler key, for a job with a 'cluster'")
        return raw, None
    if "node" in raw:
        raise FleetError(path, line("node"), f"{where}: both 'node' and 'cluster'; a job runs on a node or is "
                                             f"submitted to a cluster, not both")
    for key in NOT_ON_CLUSTER[1:]:
        if key in raw and key != "port":
            raise FleetError(path, line(key), f"{where} {key!r}: not for a job on a cluster (the scheduler "
                                              f"places it)")
    rest = {k: v for k, v in raw.items() if k not in RESOURCE_KEYS}
    given = {k: v for k, v in raw.items() if k in RESOURCE_KEYS}
    if isinstance(given.get("gpus"), list):
        raise FleetError(path, line("gpus"), f"{where} 'gpus': on a Slurm cluster 'gpus' is a count (the scheduler "
                                             f"picks which GPUs), got {show(given['gpus'])}; write gpus = "
                                             f"{len(given['gpus'])}")
    for key, v in given.items():
        check_type(path, line(key), f"{where} {key!r}", _RES_FIELDS[key], v)
    res = TaskResources(**given)
    for key, problem in res.problems():
        raise FleetError(path, line(key), f"{where} {problem}")
    if res.max_running is not None and res.max_running > res.shards:
        raise FleetError(path, line("max_running"), f"{where} 'max_running' ({res.max_running}) is more than its "
                                                    f"'shards' ({res.shards})")
    return rest, res


def hint_unknown_cluster(name: Any, clusters: Sequence[str]) -> str:
    return (f"no cluster named {name!r}{did_you_mean(str(name), clusters)}; declared: "
            f"{', '.join(clusters) or 'none'}")
