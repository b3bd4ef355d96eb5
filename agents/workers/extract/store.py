"""The extraction's output as it is written: safetensors shards, their index, the done-set.
(The names and the format's constants are in layout.py, ``--compress``'s codec in codec.py,
the reader in reader.py.)

A shard is a valid safetensors file written as a stream: the writer reserves room for the
header, streams each sample's hidden states straight from the pinned host buffer, appends
the small input_ids and loss_mask tensors at the end, then writes the header (padded with
spaces, which the format allows), fsyncs and renames the temp file to its final name. See
docs/extract-format.md for the layout.

Order of a shard's close, which makes a kill -9 at any moment harmless:

1. temp file written, fsynced, renamed to ``shard-NNNNNN.safetensors``, directory fsynced;
2. one line appended to ``index.jsonl`` (fsynced);
3. its ids appended to the done-set ``done.txt`` (fsynced).

On start, :func:`reconcile` repairs whatever a crash left between those steps: temp files
are deleted (their samples are not in the done-set, so they run again), a shard missing from
the index is indexed from its own header, and index ids missing from the done-set are added.
No sample is ever in two shards, and none is in the done-set without its shard.

The rename-after-fsync rule and the names are those of every program's shards
(common/shards.py). What is particular here: a safetensors file has its header first, so a
shard is only usable once written whole; its temp file is deleted on restart (generate's
JSONL shard, appended record by record, is continued instead), and the publish of a shard
adds an index line between the rename and the done-set.
"""

from __future__ import annotations

import glob
import json
import logging
import os
import struct
import time
from dataclasses import dataclass
from typing import Optional

import numpy as np

from ...contract.atomic import append_or_undo, fsync_dir, rename_all_durably, rename_durably
from ..common.doneset import DoneSet
from .codec import PlaneCodec
from .layout import (CODEC_PLANES_ZSTD, DONESET, DTYPE_SIZES, FORMAT, INDEX, NAMES,
                                                   StoreError, read_header)

log = logging.getLogger("gpudeck.extract")

_ALIGN = 4096


def _early_writeback() -> Optional[int]:
    """posix_fadvise(DONTNEED) after each sample starts its writeback at once (Linux); off
    with GPUDECK_EARLY_WRITEBACK=0. Measured on the H200 node's disk: 1 file written then
    fsynced 1.1-1.2 GB/s, with early writeback 1.8-2.4 GB/s (bench/extract_gpu.py)."""
    if os.environ.get("GPUDECK_EARLY_WRITEBACK", "1") != "1":
        return None
    return getattr(os, "POSIX_FADV_DONTNEED", None)


# ---------------------------------------------------------------- writing

@dataclass
class ClosedShard:
    """A shard whose bytes are all written (not yet fsynced): the finalizer's work item."""
    fd: int
    tmp: str
    final: str
    entry: dict  # its index line


class ShardWriter:
    """One shard being written. Only the writer thread touches it.

    Tensors are laid out in the order they are added (each sample's hidden states, plain or
    as compressed planes), then every sample's ``input_ids``, then every ``loss_mask``."""

    def __init__(self, out_dir: str, no: int, width: int, dtype: str, layers: list[int],
                 header_reserve: int, meta: dict, codec: Optional[PlaneCodec] = None) -> None:
        self.out_dir, self.no, self.width, self.dtype = out_dir, no, width, dtype
        self.layers, self.meta, self.codec = layers, dict(meta), codec
        if codec is not None:
            self.meta["codec"] = CODEC_PLANES_ZSTD
        self.reserve = header_reserve
        self.tmp = os.path.join(out_dir, NAMES.tmp(no))
        self.final = os.path.join(out_dir, NAMES.final(no))
        self.fd = os.open(self.tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        self.pos = header_reserve  # absolute file offset of the next hidden-state byte
        self.ids: list[str] = []
        self.n_tokens: list[int] = []
        self.n_target: list[int] = []
        self.raw_bytes = 0  # hidden states before compression
        self._tensors: list[tuple[str, str, list[int], int]] = []  # name, dtype, shape, bytes: file order
        self._small: list[tuple[np.ndarray, np.ndarray]] = []
        self._header_estimate = 512 + len(json.dumps(json.dumps(self.meta)))
        self._fadv = _early_writeback()

    def sample_header_cost(self, item_id: str) -> int:
        # three or four tensor entries with 20-digit offsets, plus the id and counts in the metadata
        return (3 if self.codec is None else 4) * 120 + 2 * len(json.dumps(item_id)) + 24

    def fits(self, item_id: str) -> bool:
        return self._header_estimate + self.sample_header_cost(item_id) <= self.reserve - 8

    @property
    def n(self) -> int:
        return len(self.ids)

    @property
    def data_bytes(self) -> int:
        return self.pos - self.reserve + sum(a.nbytes + m.nbytes for a, m in self._small)

    def _write(self, data: memoryview) -> int:
        size = data.nbytes
        _pwrite_all(self.fd, data, self.pos)
        if self._fadv is not None and size:
            # start writing these pages back now rather than at the fsync: the disk stays busy
            # all along and the page cache does not fill with gigabytes of dirty pages
            os.posix_fadvise(self.fd, self.pos, size, self._fadv)
        self.pos += size
        return size

    def add(self, item_id: str, hidden: memoryview, input_ids: np.ndarray, loss_mask: np.ndarray) -> None:
        """A sample whose hidden states ``[n, width]`` are in ``hidden`` as they are."""
        n = int(input_ids.shape[0])
        expect = n * self.width * DTYPE_SIZES[self.dtype]
        if hidden.nbytes != expect:
            raise StoreError(f"sample {item_id}: {hidden.nbytes} bytes of hidden states, expected {expect}")
        if self.codec is not None:
            raise StoreError(f"{self.tmp}: a compressed shard takes planes (add_planes), not plain states")
        k = len(self.ids)
        self._tensors.append((f"{k}.hidden_states", self.dtype, [n, self.width], self._write(hidden)))
        self._added(item_id, n, expect, input_ids, loss_mask)

    def add_planes(self, item_id: str, low: list[memoryview], top: memoryview,
                   input_ids: np.ndarray, loss_mask: np.ndarray) -> None:
        """A sample as byte planes ``[itemsize, L, n, H]`` (see :class:`PlaneCodec`): ``low``
        the lower planes, written as they are; ``top`` the top plane, compressed here."""
        n = int(input_ids.shape[0])
        itemsize, n_layers = DTYPE_SIZES[self.dtype], len(self.layers)
        plane = n * self.width
        if self.codec is None or len(low) != itemsize - 1 or top.nbytes != plane \
                or any(p.nbytes != plane for p in low):
            raise StoreError(f"sample {item_id}: planes of {[p.nbytes for p in low]} + {top.nbytes} bytes, "
                             f"expected {itemsize} of {plane}")
        k = len(self.ids)
        packed = self.codec.compress(top)
        lows = sum(self._write(p) for p in low)
        self._tensors.append((f"{k}.hidden_states.low", "U8",
                              [itemsize - 1, n_layers, n, self.width // n_layers], lows))
        self._tensors.append((f"{k}.hidden_states.high_zstd", "U8", [len(packed)],
                              self._write(memoryview(packed))))
        self._added(item_id, n, plane * itemsize, input_ids, loss_mask)

    def _added(self, item_id: str, n: int, raw: int, input_ids: np.ndarray, loss_mask: np.ndarray) -> None:
        self.raw_bytes += raw
        self.ids.append(item_id)
        self.n_tokens.append(n)
        self.n_target.append(int(loss_mask.sum()))
        self._small.append((np.ascontiguousarray(input_ids, dtype=np.int32),
                            np.ascontiguousarray(loss_mask, dtype=np.uint8)))
        self._header_estimate += self.sample_header_cost(item_id)

    def close(self) -> ClosedShard:
        """Append the small tensors and write the header; the caller fsyncs and renames."""
        tensors: dict = {}
        off = 0
        for name, dtype, shape, size in self._tensors:
            tensors[name] = {"dtype": dtype, "shape": shape, "data_offsets": [off, off + size]}
            off += size
        tail = []
        for k, (ids, _) in enumerate(self._small):
            tensors[f"{k}.input_ids"] = {"dtype": "I32", "shape": [ids.shape[0]],
                                         "data_offsets": [off, off + ids.nbytes]}
            off += ids.nbytes
            tail.append(ids)
        for k, (_, mask) in enumerate(self._small):
            tensors[f"{k}.loss_mask"] = {"dtype": "U8", "shape": [mask.shape[0]],
                                         "data_offsets": [off, off + mask.nbytes]}
            off += mask.nbytes
            tail.append(mask)
        if tail:
            _pwrite_all(self.fd, memoryview(np.concatenate([t.view(np.uint8) for t in tail])), self.pos)
        metadata = dict(self.meta)
        metadata.update(format=FORMAT, ids=json.dumps(self.ids), n_tokens=json.dumps(self.n_tokens),
                        layers=",".join(map(str, self.layers)), width=str(self.width))
        header = json.dumps({"__metadata__": metadata, **tensors}, separators=(",", ":")).encode()
        room = self.reserve - 8
        if len(header) > room:
            raise StoreError(f"{self.tmp}: header of {len(header)} bytes does not fit the {room} reserved")
        header += b" " * (room - len(header))
        _pwrite_all(self.fd, memoryview(struct.pack("<Q", room) + header), 0)
        entry = {"shard": os.path.basename(self.final), "ids": self.ids, "n_tokens": self.n_tokens,
                 "n_target": self.n_target, "bytes": self.reserve + off, "closed_at": round(time.time(), 3)}
        if self.codec is not None:
            entry["raw_bytes"] = self.raw_bytes
        return ClosedShard(self.fd, self.tmp, self.final, entry)

    def abandon(self) -> None:
        try:
            os.close(self.fd)
        finally:
            try:
                os.unlink(self.tmp)
            except OSError:
                pass


def header_reserve_for(max_samples: int) -> int:
    """Room for a shard's header: enough for ``max_samples`` samples with ids of ~200
    characters, rounded to 4 KiB so that the data starts aligned."""
    need = 8 + 4096 + max_samples * (4 * 120 + 2 * 210 + 24)
    return -(-need // _ALIGN) * _ALIGN


def _pwrite_all(fd: int, data: memoryview, offset: int) -> None:
    data = data.cast("B") if data.format != "B" or data.ndim != 1 else data
    while data:
        try:
            n = os.pwrite(fd, data, offset)
        except OSError as exc:
            path = os.readlink(f"/proc/self/fd/{fd}") if os.path.exists(f"/proc/self/fd/{fd}") else f"fd {fd}"
            raise StoreError(f"cannot write {path}: {exc.strerror or exc}") from None
        data = data[n:]
        offset += n


def seal(shard: ClosedShard) -> None:
    """fsync and close a written shard (the writer thread does it, so that several shards
    can be flushed at once)."""
    try:
        os.fsync(shard.fd)
    finally:
        os.close(shard.fd)


def publish(shard: ClosedShard, index: "IndexLog", done: DoneSet) -> None:
    """Make a sealed shard visible, in the order the module docstring gives."""
    rename_durably(shard.tmp, shard.final)
    index.append(shard.entry)
    done.add(shard.entry["ids"], sync=True)


def publish_many(shards: list[ClosedShard], index: "IndexLog", done: DoneSet) -> None:
    """:func:`publish` for several sealed shards with one fsync of each kind: all renamed,
    the directory fsynced once; all index lines, one fsync; all ids, one fsync. The order
    of the module docstring holds for each shard (and a crash between the steps leaves
    what :func:`reconcile` repairs); the finalizer batches whatever shards are waiting,
    so that its fsyncs do not fall behind several writers."""
    if len(shards) == 1:
        publish(shards[0], index, done)
        return
    rename_all_durably([(sh.tmp, sh.final) for sh in shards])
    index.append_many([sh.entry for sh in shards])
    done.add([i for sh in shards for i in sh.entry["ids"]], sync=True)


def finalize(shard: ClosedShard, index: "IndexLog", done: DoneSet) -> None:
    seal(shard)
    publish(shard, index, done)


# ---------------------------------------------------------------- the index

class IndexLog:
    """``index.jsonl``: one line per closed shard, appended with one write and an fsync."""

    def __init__(self, out_dir: str) -> None:
        self.path = os.path.join(out_dir, INDEX)
        self.entries = read_index(self.path, repair=True)
        self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)

    def append(self, entry: dict) -> None:
        self.append_many([entry])

    def append_many(self, entries: list[dict]) -> None:
        """One write and one fsync for all ``entries``; a failed write is cut off again."""
        data = "".join(json.dumps(e, separators=(",", ":")) + "\n" for e in entries).encode()
        size = os.fstat(self._fd).st_size
        append_or_undo(self._fd, data, size)
        try:
            os.fsync(self._fd)
        except OSError:
            os.ftruncate(self._fd, size)
            raise
        self.entries.extend(entries)

    def close(self) -> None:
        os.close(self._fd)


def read_index(path: str, repair: bool = False) -> list[dict]:
    """The index's entries; a last line cut by a crash is dropped (and cut off the file when
    ``repair``). Any other bad line is an error naming the line."""
    try:
        with open(path, "rb") as f:
            data = f.read()
    except FileNotFoundError:
        return []
    end = data.rfind(b"\n") + 1
    if end != len(data) and repair:
        with open(path, "r+b") as f:
            f.truncate(end)
            os.fsync(f.fileno())
    out = []
    for lineno, line in enumerate(data[:end].splitlines(), 1):
        if not line.strip():
            continue
        try:
            entry = json.loads(line)
            if not isinstance(entry, dict) or "shard" not in entry or "ids" not in entry:
                raise ValueError("expected an object with 'shard' and 'ids'")
        except ValueError as exc:
            raise StoreError(f"{path}:{lineno}: bad index line: {exc}") from None
        out.append(entry)
    return out


# ---------------------------------------------------------------- resume

@dataclass
class Resumed:
    done: DoneSet
    index: IndexLog
    next_shard: int
    removed_tmp: int
    reindexed: list[str]
    readded: int


def reconcile(out_dir: str, done_path: Optional[str] = None, min_next_shard: int = 0) -> Resumed:
    """Bring the output directory back to a consistent state after any crash (see the module
    docstring). The caller holds the directory lock. ``min_next_shard`` keeps new shard
    numbers above those already in S3 (a fresh node must not overwrite them)."""
    removed = 0
    for tmp in glob.glob(os.path.join(out_dir, NAMES.tmp_glob)):
        os.unlink(tmp)
        removed += 1
    if removed:
        fsync_dir(out_dir)
    index = IndexLog(out_dir)
    indexed = {e["shard"] for e in index.entries}
    numbers = []
    reindexed = []
    for name in sorted(os.listdir(out_dir)):
        m = NAMES.final_re.match(name)
        if not m:
            continue
        numbers.append(int(m.group(1)))
        if name not in indexed:  # renamed, then killed before its index line
            entry = entry_from_header(os.path.join(out_dir, name))
            index.append(entry)
            reindexed.append(name)
    numbers += [n for e in index.entries if (n := NAMES.number(e["shard"])) is not None]
    done = DoneSet.open(done_path or os.path.join(out_dir, DONESET))
    readded = done.add([i for e in index.entries for i in e["ids"]], sync=True)
    next_no = max([min_next_shard] + [n + 1 for n in numbers])
    return Resumed(done, index, next_no, removed, reindexed, readded)


def entry_from_header(path: str) -> dict:
    """An index line rebuilt from a shard's own header."""
    meta, tensors = read_header(path)
    ids = json.loads(meta["ids"])
    n_tokens = json.loads(meta["n_tokens"])
    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
    n_target = []
    from safetensors import safe_open
    with safe_open(path, framework="numpy") as st:
        for k in range(len(ids)):
            n_target.append(int(st.get_tensor(f"{k}.loss_mask").sum()))
    return {"shard": os.path.basename(path), "ids": ids, "n_tokens": n_tokens, "n_target": n_target,
            "bytes": size, "closed_at": round(os.stat(path).st_mtime, 3), "recovered": True}


