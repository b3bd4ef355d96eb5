"""The progress document every worker keeps, for the agent (agents/progress.py reads it)
and for whoever looks at the output directory.

Where: ``--progress`` / ``--progress-file`` when given, else ``$GPUDECK_PROGRESS_FILE`` (the
supervisor sets it for a job), else ``OUT/progress.json``. How: replaced atomically
(agents/contract/documents.py, its one writer) every second or two, without fsync: it is a report, rebuilt on every
start, never a source of truth (the done-set is). A write that fails is logged, never fatal.

Its fields are :class:`~gpudeck.agents.contract.documents.ProgressDoc`'s, which the agent
reads; a worker adds its own beside them. ``quality`` counts what a human should look at,
under the keys below; the console shows each non-zero one.
"""

from __future__ import annotations

import logging
import os
from typing import Any, Optional

from ...contract.documents import PROGRESS_FILE, ProgressDoc, write_document

# generate: completions that came back empty, thought and never answered, looped (the four
# problems of generate/quality.py, with cut_at_max_tokens), without reasoning; prompts
# that failed every attempt; prompt lines that could not be read (or were too long); lines
# dropped by --dedupe first for repeating an earlier id
GENERATE_QUALITY = ("empty_answer", "no_answer", "repetition", "no_reasoning", "cut_at_max_tokens", "errors",
                    "bad_prompts", "duplicate_ids")
# generate carries these over from the previous attempt's progress.json (the rest are per run)
GENERATE_QUALITY_KEPT = ("empty_answer", "no_answer", "repetition", "no_reasoning", "cut_at_max_tokens")
# extract: samples with no target token, with at most 8, cut at --max-seq-len, ids seen
# twice (the second is skipped), errors
EXTRACT_QUALITY = ("no_target", "short_target", "truncated", "duplicate_id", "errors")


def quality_counters(keys: tuple[str, ...]) -> dict[str, int]:
    return dict.fromkeys(keys, 0)


def progress_path(given: Optional[str], out_dir: str) -> str:
    return given or os.environ.get("GPUDECK_PROGRESS_FILE") or os.path.join(out_dir, PROGRESS_FILE)


def write_progress(path: str, doc: ProgressDoc, log: logging.Logger, **extra: Any) -> bool:
    """Replace the progress document (its fields, then the worker's ``extra`` ones); a failure
    is logged as a warning. False when it failed."""
    try:
        write_document(path, doc, extra, fsync=False)
        return True
    except OSError as exc:
        log.warning("cannot write %s: %s", path, exc.strerror or exc)
        return False
