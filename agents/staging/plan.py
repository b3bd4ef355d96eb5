"""What a stage has to copy: its sources listed (a local or shared path walked, an S3 prefix
listed), each file's place under ``to``, what is in place already, and whether the rest fits
where it goes (a file system's free space; for memory, ``/dev/shm`` or any tmpfs, the memory
available less what the job itself needs)."""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Optional

from ..contract.staging import StageItem
from ..contract.units import human_bytes
from . import record

MEMORY_FS = ("tmpfs", "ramfs")


class StageRefused(ValueError):
    """A stage that cannot be done: what and where, with the figures."""


@dataclass(frozen=True)
class SourceFile:
    rel: str  # its path under the source ("" for a source that is one file)
    size: int
    stamp: str  # local: its mtime in ns; S3: its ETag
    mtime_ns: Optional[int] = None  # local: what the copy is given; S3: its LastModified


@dataclass
class ItemPlan:
    item: StageItem
    files: list[SourceFile]
    dest: str  # ``to``, expanded
    single: bool  # the source is one file: ``dest`` is that file's path
    in_place: set[str] = field(default_factory=set)  # rels found in place
    partial: dict[str, int] = field(default_factory=dict)  # rel -> bytes of a partial of the same stamp

    def target(self, f: SourceFile) -> str:
        return self.dest if self.single else os.path.join(self.dest, f.rel)

    @property
    def total_bytes(self) -> int:
        return sum(f.size for f in self.files)

    @property
    def missing_bytes(self) -> int:
        """What is left to copy (a partial's bytes are there already)."""
        return sum(f.size - self.partial.get(f.rel, 0) for f in self.files if f.rel not in self.in_place)

    @property
    def key(self) -> str:
        return record.key_of(self.dest)


@dataclass
class StagePlan:
    items: list[ItemPlan]

    @property
    def total_bytes(self) -> int:
        return sum(i.total_bytes for i in self.items)

    @property
    def missing_bytes(self) -> int:
        return sum(i.missing_bytes for i in self.items)


def partial_name(target: str, f: SourceFile) -> str:
    """The partial's path beside ``target``: named for the source's size and stamp, so a
    resume continues only the same source's bytes."""
    h = hashlib.sha1(f"{f.size}:{f.stamp}".encode()).hexdigest()[:10]
    d, name = os.path.split(target)
    return os.path.join(d, f".{name}.{h}.partial")


def list_local(src: str, where: str) -> tuple[list[SourceFile], bool]:
    path = os.path.expanduser(src)
    try:
        st = os.stat(path)
    except FileNotFoundError:
        raise StageRefused(f"{where}: 'from' {src} does not exist on this node") from None
    except OSError as exc:
        raise StageRefused(f"{where}: 'from' {src} cannot be read: {exc.strerror or exc}") from None
    if not os.path.isdir(path):
        return [SourceFile("", st.st_size, str(st.st_mtime_ns), st.st_mtime_ns)], True
    files = []
    for root, dirs, names in os.walk(path, followlinks=True):
        dirs.sort()
        for name in sorted(names):
            full = os.path.join(root, name)
            try:
                fst = os.stat(full)  # a Hugging Face cache's links to its blobs: the blob's size and time
            except OSError as exc:
                raise StageRefused(f"{where}: {full} cannot be read: {exc.strerror or exc}") from None
            files.append(SourceFile(os.path.relpath(full, path), fst.st_size, str(fst.st_mtime_ns), fst.st_mtime_ns))
    if not files:
        raise StageRefused(f"{where}: 'from' {src} is an empty directory: nothing to stage")
    return files, False


def list_s3(src: str, where: str, client_factory: Callable[[], Any]) -> tuple[list[SourceFile], bool]:
    from ..workers.common.s3sync.remote import S3Location, describe_error

    loc = S3Location.parse(src.rstrip("/") if src.rstrip("/") != "s3:/" else src)
    try:
        client = client_factory()
        objects: list[dict[str, Any]] = []
        for page in client.get_paginator("list_objects_v2").paginate(Bucket=loc.bucket, Prefix=loc.prefix):
            objects.extend(page.get("Contents", ()))
    except ImportError:
        raise StageRefused(f"{where}: staging from {src} needs boto3 on this node: pip install 'gpudeck[s3]'") \
            from None
    except Exception as exc:  # noqa: BLE001 -- botocore's errors are many; said in one line
        raise StageRefused(f"{where}: cannot list {src}: {describe_error(exc)}") from None
    exact = [o for o in objects if o["Key"] == loc.prefix]
    if exact and loc.prefix:
        o = exact[0]
        return [_s3_file("", o)], True
    head = loc.prefix + "/" if loc.prefix else ""
    files = [_s3_file(o["Key"][len(head):], o) for o in objects
             if o["Key"].startswith(head) and not o["Key"].endswith("/")]
    if not files:
        raise StageRefused(f"{where}: 'from' {src} holds no object")
    return sorted(files, key=lambda f: f.rel), False


def _s3_file(rel: str, o: dict[str, Any]) -> SourceFile:
    modified: Any = o.get("LastModified")
    mtime_ns = int(modified.timestamp() * 1e9) if hasattr(modified, "timestamp") else None
    return SourceFile(rel, int(o["Size"]), str(o.get("ETag", "")).strip('"'), mtime_ns)


def _in_place(plan: ItemPlan, f: SourceFile, kept: Optional[dict[str, Any]]) -> bool:
    target = plan.target(f)
    try:
        st = os.stat(target)
    except OSError:
        return False
    if st.st_size != f.size:
        return False
    if plan.item.from_s3:  # the record says which object the file came from
        return kept is not None and bool(kept) and kept.get("files", {}).get(f.rel, {}).get("stamp") == f.stamp
    return f.mtime_ns is not None and st.st_mtime_ns // 1000 == f.mtime_ns // 1000


def plan_stage(items: list[StageItem], home: Path, client_factory: Optional[Callable[[], Any]] = None,
               job: str = "") -> StagePlan:
    """Each item's files, and which are in place; StageRefused when a source cannot be read."""
    plans = []
    for n, item in enumerate(items):
        where = f"job {job!r}: stage #{n + 1}" if job else f"stage #{n + 1}"
        if item.from_s3:
            from ..workers.common.s3sync.remote import make_client
            files, single = list_s3(item.src, where, client_factory or make_client)
        else:
            files, single = list_local(item.src, where)
        dest = os.path.expanduser(item.dest)
        if single and (item.dest.endswith("/") or os.path.isdir(dest)):
            name = os.path.basename(item.src.rstrip("/"))
            dest = os.path.join(dest, name)
        if not item.from_s3 and os.path.realpath(os.path.expanduser(item.src)) == os.path.realpath(dest):
            raise StageRefused(f"{where}: 'from' and 'to' are the same place ({dest})")
        p = ItemPlan(item=item, files=files, dest=dest, single=single)
        kept = record.read(home, p.key)
        for f in files:
            if _in_place(p, f, kept):
                p.in_place.add(f.rel)
                continue
            try:
                size = os.stat(partial_name(p.target(f), f)).st_size
            except OSError:
                continue
            if 0 < size <= f.size:
                p.partial[f.rel] = size
        plans.append(p)
    return StagePlan(plans)


# ---------------------------------------------------------------- does it fit

def _existing(path: str) -> str:
    p = os.path.abspath(path)
    while not os.path.exists(p):
        parent = os.path.dirname(p)
        if parent == p:
            break
        p = parent
    return p


def mount_of(path: str) -> tuple[str, str]:
    """(mount point, file system type) of the file system ``path`` is on (/proc/self/mountinfo)."""
    real = os.path.realpath(_existing(path))
    best, fstype = "/", ""
    try:
        with open("/proc/self/mountinfo") as f:
            for line in f:
                parts = line.split()
                if " - " not in line or len(parts) < 5:
                    continue
                point = parts[4].replace("\\040", " ")
                fs = line.split(" - ", 1)[1].split()[0]
                if (real == point or real.startswith(point.rstrip("/") + "/")) and len(point) >= len(best):
                    best, fstype = point, fs
    except OSError:
        pass
    return best, fstype


def memory_available() -> int:
    import psutil
    return int(psutil.virtual_memory().available)


def check_fit(plan: StagePlan, reserve_bytes: int, job: str = "",
              free_of: Callable[[str], int] = lambda p: (lambda s: s.f_bavail * s.f_frsize)(os.statvfs(p)),
              memory: Callable[[], int] = memory_available) -> None:
    """StageRefused when what is left to copy does not fit where it goes, naming both figures."""
    need: dict[str, int] = {}
    fstypes: dict[str, str] = {}
    dests: dict[str, list[str]] = {}
    for p in plan.items:
        point, fstype = mount_of(p.dest)
        need[point] = need.get(point, 0) + p.missing_bytes
        fstypes[point] = fstype
        dests.setdefault(point, []).append(p.dest)
    who = f"job {job!r}: " if job else ""
    in_memory = 0
    for point, bytes_ in need.items():
        if not bytes_:
            continue
        where = ", ".join(dests[point])
        free = free_of(_existing(dests[point][0]))
        if bytes_ > free:
            raise StageRefused(f"{who}stage to {where} does not fit: {human_bytes(bytes_)} to copy, "
                               f"{human_bytes(free)} free on {point}; nothing was copied")
        if fstypes[point] in MEMORY_FS:
            in_memory += bytes_
    if in_memory:
        available = memory()
        if in_memory + reserve_bytes > available:
            raise StageRefused(f"{who}stage into memory ({', '.join(d for pt in need if fstypes[pt] in MEMORY_FS for d in dests[pt])}) "
                               f"does not fit: {human_bytes(in_memory)} to copy plus {human_bytes(reserve_bytes)} the job "
                               f"needs itself (stage_reserve_gb), {human_bytes(available)} of memory available; "
                               f"nothing was copied")


def check(items: list[StageItem], home: Path, reserve_gb: float, job: str = "",
          client_factory: Optional[Callable[[], Any]] = None) -> StagePlan:
    """The plan, checked: StageRefused when a source cannot be read or the copy does not fit."""
    plan = plan_stage(items, home, client_factory, job)
    check_fit(plan, int(reserve_gb * 1e9), job)
    return plan
