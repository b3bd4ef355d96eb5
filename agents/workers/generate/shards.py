"""Numbered JSONL shards of finished records, written so that a kill -9 at any moment loses
nothing that finished and duplicates nothing.

Files in the output directory::

    shard-000041.jsonl        closed: at most ``shard_size`` records, never written again
    shard-000042.jsonl.tmp    the open shard: records are appended as they finish
    done.txt                  the done-set (common/doneset.py)
    quality/shard-000041.json the closed shard's quality figures (below)

The order of operations, and why:

1. A finished record is appended to the open shard with one ``write()`` right away, so a
   kill -9 after it cannot lose it (the bytes are in the kernel). Its id waits in memory.
2. ``flush()`` (every fraction of a second) fsyncs the open shard, *then* appends the waiting
   ids to the done-set. An id is never in the done-set before its record is in a shard.
3. When the open shard holds ``shard_size`` records: ``flush()``, fsync the done-set, rename
   ``.tmp`` to its final name, fsync the directory, hand the closed shard to the uploader.
4. On start, :meth:`ShardWriter.recover` reads the open shard(s): a half-written last line
   (the record a kill cut) is cut off, and ids of complete records that the done-set lacks
   (a kill between 1 and 2) are added to it. A full open shard (a kill between 2 and 3) is
   closed. Closed shards hold only ids that were in the done-set before their rename, so
   they need no scan.

So a record is in exactly one shard, and its id is in the done-set, or neither: a prompt
whose record was cut is simply generated again.

A failed write (a full disk) is undone (the file is truncated back) and raised as
:class:`ShardWriteError`; the caller holds the record and tries again later.

A closing shard is audited as it closes: the writer counts each record's quality problems
as it is appended (quality.py :class:`~.quality.Tally`, the definitions of the worker's
counters and of ``gpudeck audit``), and once the shard has its final name it writes their
figures to ``quality/shard-NNNNNN.json`` (records, useful, useful_pct, the count of each
problem with the first id that had it, the shard's bytes, when it closed) with
``atomic_write_json``: the file is whole or absent, never half. Beside the shard rather than
in progress.json, because progress.json is one attempt's document rewritten every second,
and a five-day run closes thousands of shards; a figures file is written once, like its
shard, and read by whoever wants it (``gpudeck audit OUT`` takes it for the shard when its
``bytes`` match, and reads the shard only when it has none). A kill -9 after the rename and
before the figures leaves the newest closed shard without them: :meth:`ShardWriter.recover`
reads that one shard and writes them; a shard that recovery closes gets them from the
records it read. A figures file that cannot be written (a full disk) is said in the log and
not retried: the figures are a report, the shard and the done-set are the output.

The names, and the fsync-before-rename rule, are those of every program's shards
(common/shards.py). What is particular to this writer: a JSONL shard can be appended to and
read back record by record, so the open shard *is* the output of records finished before a
crash (step 4), where extract's safetensors shard must be written whole and its temp file is
thrown away (extract/store.py).
"""

from __future__ import annotations

import json
import logging
import os
import time
from dataclasses import dataclass, field
from typing import Callable, Iterable, Optional

from ...contract.atomic import TMP_SUFFIX, append_or_undo, atomic_write_bytes, atomic_write_json, fsync_dir, \
    rename_durably
from ..common.doneset import DoneSet
from ..common.shards import JSONL as NAMES
from .quality import Tally

QUALITY_DIR = "quality"  # OUT/quality/shard-NNNNNN.json: a closed shard's quality figures

log = logging.getLogger("gpudeck.shards")


def figures_path(out_dir: str, shard: str) -> str:
    """Where the quality figures of the closed shard ``shard`` (its file name) are written."""
    return os.path.join(out_dir, QUALITY_DIR, shard[:-len(".jsonl")] + ".json")


def read_figures(out_dir: str, shard: str) -> "Optional[Tally]":
    """The figures written for ``shard`` when they are there and were counted over the shard
    as it is now (their ``bytes`` are its size); else None (count the shard itself)."""
    try:
        with open(figures_path(out_dir, shard)) as f:
            doc = json.load(f)
        if doc.get("bytes") != os.path.getsize(os.path.join(out_dir, shard)):
            return None
    except (OSError, ValueError, AttributeError):
        return None
    return Tally.from_document(doc)


def tally_file(path: str) -> Tally:
    """The figures of a JSONL shard, read whole."""
    t = Tally()
    with open(path, "rb") as f:
        t.add_jsonl(f.read())
    return t


class ShardWriteError(OSError):
    """A shard or the done-set could not be written; the message names the file."""


def ids_in_jsonl(path: str) -> list[str]:
    """The ``id`` of every complete record of a JSONL shard (S3 re-queue and restore)."""
    ids = []
    with open(path, "rb") as f:
        for raw in f:
            if raw.endswith(b"\n"):
                try:
                    ids.append(str(json.loads(raw)["id"]))
                except (ValueError, KeyError, TypeError):
                    continue
    return ids


@dataclass
class Recovery:
    """What :meth:`ShardWriter.recover` found."""
    closed: list[str] = field(default_factory=list)  # names of the closed shards present
    open_records: int = 0  # complete records in the open shard
    ids_added: int = 0  # ids found in the open shard that the done-set lacked
    cut_bytes: int = 0  # bytes of half-written records cut off
    bad_lines: int = 0  # complete lines that did not parse, dropped
    closed_now: list[str] = field(default_factory=list)  # open shards closed during recovery
    audited: list[str] = field(default_factory=list)  # closed shards whose missing figures were written


class ShardWriter:
    """Appends JSONL records to the open shard, feeds the done-set in the safe order, and
    closes shards at ``shard_size`` records. ``on_closed(name, ids)`` is called for each
    closed shard (the S3 uploader's ``submit``); ``on_durable(tokens)`` with the opaque
    tokens passed to :meth:`add` once their ids are in the done-set."""

    def __init__(self, out_dir: str, done: DoneSet, shard_size: int = 1000,
                 on_closed: Optional[Callable[[str, list[str]], None]] = None,
                 on_durable: Optional[Callable[[list], None]] = None) -> None:
        self.out_dir = out_dir
        self.done = done
        self.shard_size = shard_size
        self.on_closed = on_closed
        self.on_durable = on_durable
        self.next_number = 0
        self._fd: Optional[int] = None
        self._number: Optional[int] = None
        self._size = 0
        self._ids: list[str] = []  # ids of the records in the open shard
        self._waiting: list[tuple[str, object]] = []  # (id, token) written, not yet in the done-set
        self._unsynced = False
        self._tally = Tally()  # the quality figures of the open shard's records
        self.last_figures: Optional[dict] = None  # those written for the last shard closed

    # ---------------------------------------------------------------- start

    def recover(self, reserved_numbers: Iterable[int] = ()) -> Recovery:
        """Repair what a crash left; pick the next shard number after every local shard and
        every number in ``reserved_numbers`` (shards already in S3, which are never
        overwritten)."""
        rec = Recovery()
        reserved = set(reserved_numbers)
        names = sorted(os.listdir(self.out_dir))
        closed_numbers = {int(m.group(1)) for n in names if (m := NAMES.final_re.match(n))}
        rec.closed = sorted(n for n in names if NAMES.final_re.match(n))
        taken = closed_numbers | reserved
        opens = sorted((int(m.group(1)), n) for n in names if (m := NAMES.tmp_re.match(n)))
        self._remove_stale_figures()
        if rec.closed and read_figures(self.out_dir, rec.closed[-1]) is None:
            # a kill between the newest shard's rename and its figures (older shards of a run
            # before figures were written are left to `gpudeck audit`, which reads them)
            newest = rec.closed[-1]
            if self._write_figures(newest, tally_file(os.path.join(self.out_dir, newest))):
                rec.audited.append(newest)
        for i, (number, name) in enumerate(opens):
            path = os.path.join(self.out_dir, name)
            ids, cut, bad, tally = self._repair_open(path)
            rec.cut_bytes += cut
            rec.bad_lines += bad
            rec.ids_added += self.done.add(ids, sync=True)  # rule 4: ids of records a kill left
            free = number not in taken
            if i == len(opens) - 1 and free and len(ids) < self.shard_size:
                self._reopen(number, path, ids)
                self._tally = tally
                rec.open_records = len(ids)
                taken.add(number)
            elif ids:
                final_number = number if free else max(taken | {number}) + 1
                final = NAMES.final(final_number)
                rename_durably(path, os.path.join(self.out_dir, final))
                self._write_figures(final, tally)
                taken.add(final_number)
                rec.closed.append(final)  # listed, not passed to on_closed: the caller queues rec.closed
                rec.closed_now.append(final)
            else:
                os.unlink(path)
        self.next_number = max(taken) + 1 if taken else 0
        return rec

    def _remove_stale_figures(self) -> None:
        """Temp files of figures a kill interrupted (the caller holds the directory)."""
        directory = os.path.join(self.out_dir, QUALITY_DIR)
        try:
            names = os.listdir(directory)
        except OSError:
            return
        for name in names:
            if name.endswith(TMP_SUFFIX):
                try:
                    os.unlink(os.path.join(directory, name))
                except OSError:
                    pass

    def _write_figures(self, shard: str, tally: Tally) -> bool:
        """The closed shard's quality figures, written whole (see the module docstring); an
        error is said in the log, and False returned."""
        path = figures_path(self.out_dir, shard)
        try:
            doc = {"shard": shard, "bytes": os.path.getsize(os.path.join(self.out_dir, shard)),
                   "closed_at": time.time(), **tally.document()}
            if not os.path.isdir(os.path.dirname(path)):
                os.makedirs(os.path.dirname(path), exist_ok=True)
                fsync_dir(self.out_dir)
            atomic_write_json(path, doc)
        except OSError as exc:
            log.error("cannot write the quality figures of %s to %s: %s; `gpudeck audit %s` counts them from the "
                      "shard", shard, path, exc.strerror or exc, self.out_dir)
            return False
        self.last_figures = doc
        return True

    def _repair_open(self, path: str) -> tuple[list[str], int, int, Tally]:
        """Read an open shard; drop a half-written tail and unparsable lines; return the ids
        and the quality figures of the records kept."""
        with open(path, "rb") as f:
            data = f.read()
        end = data.rfind(b"\n") + 1
        cut = len(data) - end
        ids: list[str] = []
        good: list[bytes] = []
        bad = 0
        tally = Tally()
        for i, raw in enumerate(data[:end].split(b"\n")[:-1]):
            try:
                obj = json.loads(raw)
                ids.append(str(obj["id"]))
                good.append(raw)
                tally.add_record(obj)
            except (ValueError, KeyError, TypeError):
                bad += 1
                log.error("%s line %d is not a record (%r...); dropped", path, i + 1, raw[:80])
        if bad:
            atomic_write_bytes(path, b"".join(r + b"\n" for r in good))
        elif cut:
            with open(path, "r+b") as f:
                f.truncate(end)
                os.fsync(f.fileno())
        if cut:
            log.warning("%s: cut %d bytes of a record a crash left half-written", path, cut)
        return ids, cut, bad, tally

    def _reopen(self, number: int, path: str, ids: list[str]) -> None:
        self._fd = os.open(path, os.O_WRONLY | os.O_APPEND)
        self._number = number
        self._size = os.fstat(self._fd).st_size
        self._ids = list(ids)

    # ---------------------------------------------------------------- writing

    @property
    def open_name(self) -> Optional[str]:
        return NAMES.tmp(self._number) if self._number is not None else None

    @property
    def waiting(self) -> int:
        """Records written whose ids are not in the done-set yet."""
        return len(self._waiting)

    def add(self, record_id: str, line: bytes, token: object = None, record: Optional[dict] = None,
            found: Optional[tuple[str, ...]] = None) -> None:
        """Append one record (``line`` is its JSON without the newline; ``record`` the same as
        a dict, and ``found`` its quality problems when the caller judged them already: else
        the line is parsed for the shard's figures). Raises ShardWriteError / DoneSetError
        with nothing written when the disk refuses it."""
        if self._fd is not None and len(self._ids) >= self.shard_size:
            self.close_shard()  # full, and an earlier close failed: close it before writing more
        if self._fd is None:
            self._open_next()
        fd, number = self._fd, self._number
        assert fd is not None and number is not None  # a shard is open, with its number
        data = line + b"\n"
        try:
            append_or_undo(fd, data, self._size)
        except OSError as exc:
            raise ShardWriteError(exc.errno, f"cannot write {os.path.join(self.out_dir, NAMES.tmp(number))}: "
                                             f"{exc.strerror or exc}") from None
        self._size += len(data)
        if record is not None:
            self._tally.add(record_id, record, found)
        else:
            try:
                self._tally.add_record(json.loads(line))
            except ValueError:
                pass
        self._ids.append(record_id)
        self._waiting.append((record_id, token))
        self._unsynced = True
        if len(self._ids) >= self.shard_size:
            try:
                self.close_shard()
            except OSError as exc:  # the record is written: report, close on the next add or flush
                log.error("%s; the full shard stays open until it can be closed", exc)

    def _open_next(self) -> None:
        number = self.next_number
        path = os.path.join(self.out_dir, NAMES.tmp(number))
        try:
            self._fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_EXCL, 0o644)
        except OSError as exc:
            raise ShardWriteError(exc.errno, f"cannot create {path}: {exc.strerror or exc}") from None
        fsync_dir(self.out_dir)
        self._number, self._size, self._ids = number, 0, []
        self._tally = Tally()
        self.next_number = number + 1

    def flush(self, sync_done: bool = False) -> int:
        """fsync the open shard, then put the waiting ids in the done-set (rule 2). Returns
        how many ids went in. Raises ShardWriteError / DoneSetError (ids stay waiting)."""
        if self._fd is not None and self._unsynced:
            try:
                os.fsync(self._fd)
            except OSError as exc:
                raise ShardWriteError(exc.errno, f"cannot fsync {self.open_name}: {exc.strerror or exc}") from None
            self._unsynced = False
        if not self._waiting:
            if sync_done:
                self.done.sync(force=True)
            return 0
        waiting = self._waiting
        self.done.add([i for i, _ in waiting], sync=sync_done)
        self._waiting = []
        if self.on_durable:
            self.on_durable([t for _, t in waiting])
        if self._fd is not None and len(self._ids) >= self.shard_size and not sync_done:
            self.close_shard()
        return len(waiting)

    def close_shard(self) -> Optional[str]:
        """Close the open shard now (full, or the last one of a run); returns its name."""
        if self._fd is None:
            return None
        self.flush(sync_done=True)  # rule 3: ids durable before the shard gets its final name
        fd, number = self._fd, self._number
        assert fd is not None and number is not None  # the shard is still open, with its number
        try:
            os.fsync(fd)
        except OSError as exc:
            raise ShardWriteError(exc.errno, f"cannot fsync {NAMES.tmp(number)}: {exc.strerror or exc}") from None
        os.close(fd)
        self._fd = None
        tmp = os.path.join(self.out_dir, NAMES.tmp(number))
        final = NAMES.final(number)
        if not self._ids:
            os.unlink(tmp)
            self._number = None
            return None
        rename_durably(tmp, os.path.join(self.out_dir, final))
        self._write_figures(final, self._tally)  # audited as it closes (module docstring)
        ids, self._ids, self._number, self._tally = self._ids, [], None, Tally()
        if self.on_closed:
            self.on_closed(final, ids)
        return final

    def close(self, final: bool) -> Optional[str]:
        """Stop writing. ``final``: the run is complete, so the partial shard is closed too;
        otherwise it stays open (``.tmp``) for the next start to continue."""
        if final:
            return self.close_shard()
        self.flush(sync_done=True)
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
        return None
