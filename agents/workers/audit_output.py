"""What ``gpudeck audit`` says of an output rather than of a dataset: what an S3 prefix holds
(listed now), and the quality figures of a generate output (its shards, on disk or on S3),
counted by the generate worker's own code (generate/quality.py). audit.py names these too:
``gpudeck audit`` imports them from there."""

from __future__ import annotations

import re
from typing import Any, Optional


def s3_listing(url: str, endpoint_url: Optional[str]) -> tuple[Any, Any, dict[str, int]]:
    """(location, client, objects) of ``s3://bucket/prefix``, listed now; the errors of
    :func:`s3_inventory`."""
    from .common.s3sync.remote import S3Error, S3Location, list_objects, make_client

    loc = S3Location.parse(url)  # ValueError: said as it is
    try:
        client = make_client(endpoint_url)
        return loc, client, list_objects(client, loc)
    except S3Error as exc:
        raise RuntimeError(str(exc)) from None
    except Exception as exc:  # noqa: BLE001 -- boto3 missing, its configuration: said, never a traceback
        raise RuntimeError(f"cannot list {loc.url()}: {type(exc).__name__}: {exc}") from None


def s3_inventory(url: str, endpoint_url: Optional[str] = None,
                 listing: Optional[dict[str, int]] = None) -> dict[str, Any]:
    """What ``s3://bucket/prefix`` holds, listed now (or ``listing``, a listing made already):
    objects, bytes, and the same by top-level folder (a part's ``part-I-of-N/``). ValueError
    for a URL that is not one; RuntimeError, saying what, when it cannot be listed (boto3
    missing, credentials, the network)."""
    from .common.s3sync.remote import S3Location

    if listing is None:
        loc, _, objects = s3_listing(url, endpoint_url)
    else:
        loc, objects = S3Location.parse(url), listing
    folders: dict[str, list[int]] = {}
    for name, size in objects.items():
        head, sep, _ = name.partition("/")
        f = folders.setdefault(head + "/" if sep else "", [0, 0])
        f[0] += 1
        f[1] += size
    return {"prefix": loc.url(), "objects": len(objects), "bytes": sum(objects.values()),
            "folders": [{"folder": k or None, "objects": v[0], "bytes": v[1]} for k, v in sorted(folders.items())]}


# ---------------------------------------------------------------- a generate output

# a generate shard of an output: in it, or in one of its parts' folders (``--part I/N``);
# ``.tmp``: the open shard, whose complete records are output too (generate/shards.py)
_GEN_SHARD = re.compile(r"^(?:part-\d+-of-\d+/)?shard-\d{6,}\.jsonl(?:\.tmp)?$")


def generate_shards_in(directory: str) -> list[str]:
    """The generate shards of the output directory ``directory`` (its parts' too), as paths
    relative to it, in order; empty when it is not a generate output."""
    import os

    found = []
    for name in sorted(os.listdir(directory)):
        if _GEN_SHARD.match(name):
            found.append(name)
        elif re.fullmatch(r"part-\d+-of-\d+", name) and os.path.isdir(os.path.join(directory, name)):
            found += [f"{name}/{n}" for n in sorted(os.listdir(os.path.join(directory, name)))
                      if _GEN_SHARD.match(n)]
    return found


def _quality_doc(where: str, rows: list[dict[str, Any]], total: Any, min_useful_pct: float) -> dict[str, Any]:
    doc = {"output": where, "shards": rows, "min_useful_pct": min_useful_pct, **total.document()}
    reasons = []
    if not total.records:
        reasons.append("The output holds no records.")
    elif min_useful_pct and 100.0 * total.useful / total.records < min_useful_pct:
        worst = max(doc["problems"], key=lambda k: doc["problems"][k])
        reasons.append(f"{doc['useful_pct']:g}% of the {total.records:,} records are useful, under "
                       f"{min_useful_pct:g}% (--min-useful-pct)"
                       + (f"; the most common problem: {worst} ({doc['problems'][worst]:,})"
                          if doc["problems"][worst] else "") + ".")
    doc.update(degenerate=bool(reasons), reasons=reasons)
    return doc


def audit_generate_dir(directory: str, min_useful_pct: float = 50.0) -> Optional[dict[str, Any]]:
    """The quality figures of the generate output in ``directory`` (generate/quality.py: the
    worker's own definitions and counting code), per shard and in total; None when it holds
    no generate shard. A closed shard's figures are those the worker wrote as it closed it
    (``quality/shard-NNNNNN.json``) when they match its size, else it is read; the open
    shard's complete records are read. Raises OSError when a shard cannot be read."""
    import os

    from .generate.quality import Tally
    from .generate.shards import read_figures, tally_file

    names = generate_shards_in(directory)
    if not names:
        return None
    total, rows = Tally(), []
    for rel in names:
        folder, _, name = rel.rpartition("/")
        base = os.path.join(directory, folder) if folder else directory
        is_open = name.endswith(".tmp")
        t = None if is_open else read_figures(base, name)
        source = "figures" if t is not None else "read"
        if t is None:
            t = tally_file(os.path.join(base, name))
        total.merge(t)
        rows.append({"shard": rel, "open": is_open, "from": source, **t.document()})
    return _quality_doc(os.path.abspath(directory), rows, total, min_useful_pct)


def audit_generate_s3(url: str, endpoint_url: Optional[str] = None, min_useful_pct: float = 50.0,
                      listing: Optional[tuple[Any, Any, dict[str, int]]] = None) -> Optional[dict[str, Any]]:
    """:func:`audit_generate_dir` for ``s3://bucket/prefix``: its generate shards (its
    parts' too) are read one by one; None when it holds none. ``listing``: what
    ``s3_listing`` returned already. RuntimeError, saying which object, when one cannot be
    read."""
    from .common.s3sync.remote import describe_error
    from .generate.quality import Tally

    loc, client, objects = listing if listing is not None else s3_listing(url, endpoint_url)
    names = sorted(n for n in objects if _GEN_SHARD.match(n) and not n.endswith(".tmp"))
    if not names:
        return None
    total, rows = Tally(), []
    for name in names:
        try:
            data = client.get_object(Bucket=loc.bucket, Key=loc.key(name))["Body"].read()
        except Exception as exc:  # noqa: BLE001 -- boto3's errors are many; the message says which
            raise RuntimeError(f"cannot read {loc.url(name)}: {describe_error(exc)}") from None
        t = Tally()
        t.add_jsonl(data)
        total.merge(t)
        rows.append({"shard": name, "open": False, "from": "read", **t.document()})
    return _quality_doc(loc.url(), rows, total, min_useful_pct)


def render_generate_quality(doc: dict[str, Any]) -> str:
    """What ``gpudeck audit`` prints of :func:`audit_generate_dir`'s document."""
    from .generate.quality import CUT, EMPTY, NO_ANSWER, REPETITION

    n = doc["records"]
    pct = (lambda k: f"{100.0 * k / n:.1f}%") if n else (lambda k: "-")
    kept = sum(1 for r in doc["shards"] if r["from"] == "figures")
    out = [f"generate output {doc['output']}: {n:,} records in {len(doc['shards']):,} shards"
           + (" (each counted by the worker as it closed)" if kept == len(doc["shards"]) else
              f" ({kept:,} with the figures the worker wrote at their close, the others read now)" if kept else "")]
    out.append(f"  useful:              {doc['useful']:>10,}  {pct(doc['useful']):>6}")
    for key, label in ((CUT, "cut at max_tokens"), (EMPTY, "empty answer"), (NO_ANSWER, "no answer"),
                       (REPETITION, "repetition")):
        k = doc["problems"][key]
        e = doc["examples"].get(key)
        out.append(f"  {label + ':':<20} {k:>10,}  {pct(k):>6}" + (f"  e.g. id {e}" if e else ""))
    out.append(f"  {'shard':<30} {'records':>8} {'useful':>7} {'cut':>6} {'empty':>6} {'no answer':>10} "
               f"{'repetition':>11}")
    for r in doc["shards"]:
        p = r["problems"]
        useful = "-" if r["useful_pct"] is None else f"{r['useful_pct']:.1f}%"
        out.append(f"  {r['shard'] + (' (open)' if r['open'] else ''):<30} {r['records']:>8,} {useful:>7} "
                   f"{p[CUT]:>6,} {p[EMPTY]:>6,} {p[NO_ANSWER]:>10,} {p[REPETITION]:>11,}")
    out.append("DEGENERATE: " + " ".join(doc["reasons"]) if doc["degenerate"] else
               f"OK: at least {doc['min_useful_pct']:g}% of the records are useful.")
    return "\n".join(out)
