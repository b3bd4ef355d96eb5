"""The fleet file's ``[[jobs]]``: each table read by the one reader of a job's fields
(``JobSpec``), its kind's options by the kind's dataclass, then the jobs as a whole: ``servers``
and ``workers`` that name engine jobs, and ``after`` (remote/fleet.py reads the rest)."""

from __future__ import annotations

import dataclasses
import functools
from typing import Any, Callable, Optional, cast

from ..agents.contract.cluster import RESOURCE_KEYS
from ..agents.contract.jobs import KINDS, JobKind, JobSpec, SpecError, completion_marker, shell_command
from ..agents.contract.kinds import GenerateOptions, KindOptions, OptionError
from .fleet_check import FleetError, did_you_mean
from .fleet_cluster import hint_unknown_cluster, pull_resources
from .fleet_nodes import LOCAL, Node
from .fleet_text import TextLocator

# after_markers, after_endpoints: not keys; resolve_after fills them from `after`
JOB_FIELDS = {f.name: f for f in dataclasses.fields(JobSpec) if f.name not in ("after_markers", "after_endpoints")}


def parse_jobs(raw_jobs: Any, defaults: dict[str, Any], names: set[str], path: str,
                loc: TextLocator, stall_s: Optional[float] = None, warnings: Optional[list[str]] = None,
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
               loc: TextLocator, stall_s: Optional[float], warnings: Optional[list[str]],
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
        if k in JOB_FIELDS and k not in ("options", "resources"):  # JobSpec checks them
            values[k] = v
        elif k in option_keys:
            options[k] = v
        else:
            allowed = sorted(set(JOB_FIELDS) - {"options", "resources"} | option_keys | set(RESOURCE_KEYS))
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


def resolve_servers(jobs: list[JobSpec], nodes: dict[str, Node], path: str, loc: TextLocator) -> list[JobSpec]:
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


def resolve_after(jobs: list[JobSpec], path: str, loc: TextLocator) -> list[JobSpec]:
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

