"""Shard files: their names, and the durable close both shard writers rely on.

Both programs write numbered shards into their output directory, ``shard-NNNNNN.EXT``
(six digits at least, so names sort in number order), each first as a temp file that only
its final rename makes visible:

    generate   shard-000042.jsonl.tmp          -> shard-000042.jsonl
    extract    .shard-000042.safetensors.tmp   -> shard-000042.safetensors

The temp names differ on purpose, and stay as they are because a restart must recognize
what an older run left: generate's open shard is a JSONL file that a restart *continues*
(its complete records are kept, see generate/shards.py), so it is listed like a shard;
extract's temp file is half a safetensors file that a restart *deletes* (see
extract/store.py), so it is hidden.

What both do the same way, and why (the crash-ordering rule): a shard's bytes are fsynced
before its rename, and the rename is fsynced in the directory
(common/atomic.py ``rename_durably``) before any id of the shard goes into the done-set.
A kill -9 between two steps leaves either a temp file (redone or recovered on restart) or
a closed shard whose ids the restart adds again; never an id without its record.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from typing import Optional

# any shard of any program, as listed under an S3 prefix: ``shard-<number>.<anything>``
ANY_SHARD_NUMBER = re.compile(r"(?:^|/)shard-(\d+)\.")


@dataclass(frozen=True)
class ShardNames:
    """The names of one program's shards: ``ext`` their extension, ``hidden_tmp`` whether
    the temp file of a shard being written starts with a dot (see the module docstring)."""

    ext: str
    hidden_tmp: bool = False
    final_re: re.Pattern = field(init=False, repr=False, compare=False)
    tmp_re: re.Pattern = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        ext = re.escape(self.ext)
        dot = r"\." if self.hidden_tmp else ""
        object.__setattr__(self, "final_re", re.compile(rf"^shard-(\d{{6,}})\.{ext}$"))
        object.__setattr__(self, "tmp_re", re.compile(rf"^{dot}shard-(\d{{6,}})\.{ext}\.tmp$"))

    def final(self, number: int) -> str:
        return f"shard-{number:06d}.{self.ext}"

    def tmp(self, number: int) -> str:
        return ("." if self.hidden_tmp else "") + self.final(number) + ".tmp"

    @property
    def tmp_glob(self) -> str:
        """A glob pattern of the temp files (for ``glob.glob``)."""
        return ("." if self.hidden_tmp else "") + f"shard-*.{self.ext}.tmp"

    def number(self, name: str) -> Optional[int]:
        """The number of a closed shard's name; None for any other name."""
        m = self.final_re.match(name)
        return int(m.group(1)) if m else None

    def closed_in(self, directory: str) -> list[str]:
        """The closed shards in ``directory``, in name (= number) order."""
        return sorted(n for n in os.listdir(directory) if self.final_re.match(n))


JSONL = ShardNames("jsonl")
SAFETENSORS = ShardNames("safetensors", hidden_tmp=True)

