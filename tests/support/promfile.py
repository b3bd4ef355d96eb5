"""What tests/system/test_promfile.py and tests/unit/test_promfile.py share (split out of
tests/test_promfile.py when the suite went into tiers)."""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families
MIB = 1024 * 1024


# ---------------------------------------------------------------- the series, against a snapshot


def parse(text: str) -> dict[str, list[tuple[dict[str, str], float]]]:
    """Every sample of a textfile by sample name: [(labels, value)]; a family with no sample is
    there too, empty (a counter's under its sample name, ``..._total``)."""
    out: dict[str, list[tuple[dict[str, str], float]]] = {}
    for fam in text_string_to_metric_families(text):
        out.setdefault(fam.name + ("_total" if fam.type == "counter" else ""), [])
        for s in fam.samples:
            out.setdefault(s.name, []).append((dict(s.labels), s.value))
    return out
