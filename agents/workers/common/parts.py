"""``--part I/N`` (extract and generate): one job of N takes the records of part I, so that
N jobs (a Slurm array, one job per GPU) split one input between them without talking.

A record belongs to part ``crc32(id) % N``: a stable hash of its id, the one the worker keys
its done-set by, so the split does not depend on the order or the number of the input files
and every record is in exactly one part. A part writes into ``OUT/part-I-of-N`` and, with
``--s3``, under the prefix ``part-I-of-N``.
"""

from __future__ import annotations

import zlib
from typing import Optional


def in_part(item_id: str, part: Optional[tuple[int, int]]) -> bool:
    """Whether ``item_id`` belongs to part I of N (always, without a part)."""
    if part is None:
        return True
    i, n = part
    return zlib.crc32(item_id.encode("utf-8", "surrogateescape")) % n == i


def part_name(part: tuple[int, int]) -> str:
    """The output subdirectory and S3 prefix of a part: ``part-I-of-N``."""
    return f"part-{part[0]}-of-{part[1]}"
