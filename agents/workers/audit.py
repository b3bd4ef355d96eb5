"""What a human should see about a dataset before a multi-day launch.

Reads JSONL in any of these shapes, line by line:

- chat: ``messages`` (OpenAI) or ``conversations`` (ShareGPT), optionally with
  ``reasoning_content`` on assistant turns; the target is what the assistant says;
- generated records (``gpudeck generate`` output): ``messages`` + ``reasoning`` + ``answer``;
- tokenized: ``input_ids`` + ``loss_mask`` (or ``labels`` with -100 for ignored positions);
  the target is the positions the loss sees.

Two modes. ``training``: data about to be trained on or extracted from; the targets must be
real answers. ``prompts`` (what ``generate`` runs before it starts): the answers will be
generated again, so only the prompts must be usable. ``auto`` (the default of ``gpudeck
audit``) is ``training``, unless no sample has an answer at all: that is a prompts file (one
prompt or conversation ending in a user turn a line, as ``generate`` reads), audited as
prompts.

For chat data the target length is estimated (words and punctuation marks: close to a BPE
token count for English, and exact enough to tell 6 from 600). Tokenized data is counted
exactly.

The dataset of the story (../shared/context: 914K samples, 87% with 6 target tokens, answers
"OK.") fails with a sentence that says so. :func:`audit_file` is the API; ``gpudeck audit``
prints :meth:`AuditReport.render` and exits 1 when the data is degenerate.
"""

from __future__ import annotations

import collections
import hashlib
import json
import random
import re
from dataclasses import dataclass, field
from typing import Any, Optional

# an output (an S3 prefix, a generate output's quality), named here too: audit_output.py
from .audit_output import (audit_generate_dir, audit_generate_s3, generate_shards_in, render_generate_quality,
                           s3_inventory, s3_listing)
from .common.chat import ROLES, context_for_last_answer, to_messages

SHORT_TARGET = 8  # tokens; a "sample with almost no target"
MAX_SHORT_SHARE = 0.20  # training: more samples than this with <= SHORT_TARGET target tokens is degenerate
MAX_PLACEHOLDER_SHARE = 0.10  # training: empty or placeholder answers
MAX_SAME_TARGET_SHARE = 0.10  # training, tokenized: one short target sequence repeated this often
MAX_BAD_SHARE = 0.05  # lines that cannot be read
MAX_EMPTY_PROMPT_SHARE = 0.10  # prompts: no text in the last user turn
MAX_DUPLICATE_SHARE = 0.50  # samples that repeat an earlier prompt
PLACEHOLDERS = {"", "ok", "ok.", "okay", "okay.", "...", "…", "n/a", "na", "none", "null", "todo", "tbd", "-", ".",
                "?", "placeholder", "<placeholder>", "answer", "response", "<answer>", "<response>", "xxx", "test"}
BUCKETS = ((0, 0), (1, 8), (9, 32), (33, 128), (129, 512), (513, 2048), (2049, 8192), (8193, None))
_TOKEN = re.compile(r"\w+|[^\w\s]", re.UNICODE)
_MAX_DISTINCT = 200_000  # bound on the counters of distinct short targets


def estimate_tokens(text: str) -> int:
    return len(_TOKEN.findall(text)) if text else 0


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # OpenAI content parts
        return " ".join(p.get("text", "") for p in content if isinstance(p, dict) and isinstance(p.get("text"), str))
    return ""


def _hash(data: bytes) -> int:
    return int.from_bytes(hashlib.blake2b(data, digest_size=8).digest(), "little")


@dataclass
class AuditReport:
    path: str
    mode: str  # training | prompts
    lines: int = 0
    samples: int = 0
    sampled: bool = False  # a sample of the file, not all of it
    kinds: collections.Counter = field(default_factory=collections.Counter)  # chat | generated | tokenized
    bad_lines: int = 0
    bad_examples: list[str] = field(default_factory=list)
    roles: collections.Counter = field(default_factory=collections.Counter)
    turns: collections.Counter = field(default_factory=collections.Counter)  # messages per sample
    target_counts: collections.Counter = field(default_factory=collections.Counter)  # exact target length -> samples
    targets_measured: int = 0
    target_tokens_total: int = 0
    empty_answers: int = 0
    placeholder_answers: int = 0
    answers_seen: int = 0
    top_answers: collections.Counter = field(default_factory=collections.Counter)  # short answer text -> samples
    short_targets: collections.Counter = field(default_factory=collections.Counter)  # short target hash -> samples
    empty_prompts: int = 0
    prompt_counts: collections.Counter = field(default_factory=collections.Counter)  # prompts: est. tokens -> samples
    unanswered: int = 0  # chat samples without any answer (what a prompts file holds)
    recognized: Optional[str] = None  # mode auto: why this mode was chosen
    duplicates: int = 0  # samples whose prompt appeared before
    duplicate_ids: int = 0  # lines whose "id" an earlier line has (a worker would take them for one record)
    first_duplicate_id: Optional[str] = None  # "file:line: id 'x'" of the first repeat
    reasons: list[str] = field(default_factory=list)

    @property
    def degenerate(self) -> bool:
        return bool(self.reasons)

    @property
    def short_share(self) -> float:
        short = sum(n for k, n in self.target_counts.items() if k <= SHORT_TARGET)
        return short / self.targets_measured if self.targets_measured else 0.0

    def histogram(self) -> list[tuple[str, int]]:
        return _histogram(self.target_counts)

    def to_json(self) -> dict:
        return {
            "path": self.path, "mode": self.mode, "lines": self.lines, "samples": self.samples,
            "sampled": self.sampled, "kinds": dict(self.kinds), "bad_lines": self.bad_lines,
            "bad_examples": self.bad_examples, "roles": dict(self.roles),
            "turns": {str(k): v for k, v in sorted(self.turns.items())},
            "target_tokens_histogram": dict(self.histogram()), "short_target_share": round(self.short_share, 4),
            "prompt_tokens_histogram": dict(_histogram(self.prompt_counts)) if self.prompt_counts else None,
            "target_tokens_mean": round(self.target_tokens_total / self.targets_measured, 1)
            if self.targets_measured else None,
            "empty_answers": self.empty_answers, "placeholder_answers": self.placeholder_answers,
            "empty_prompts": self.empty_prompts, "duplicates": self.duplicates,
            "duplicate_ids": self.duplicate_ids, "first_duplicate_id": self.first_duplicate_id,
            "unanswered": self.unanswered, "recognized": self.recognized,
            "degenerate": self.degenerate, "reasons": self.reasons,
        }

    def render(self) -> str:
        kinds = ", ".join(f"{k} {v:,}" for k, v in self.kinds.most_common()) or "none"
        out = [f"audit of {self.path} ({self.mode}): {self.samples:,} samples"
               + (f" (a sample of {self.lines:,} lines read)" if self.sampled else "")
               + f"; kinds: {kinds}; unreadable lines: {self.bad_lines:,}"]
        out += [f"  {e}" for e in self.bad_examples]
        if self.recognized:
            out.append(self.recognized)
        if self.targets_measured:
            est = " (chat: estimated from words and punctuation)" if self.kinds.get("chat") or \
                self.kinds.get("generated") else ""
            what = "target tokens of the existing answers (generate replaces them)" if self.mode == "prompts" \
                else "target tokens per sample"
            out.append(f"{what}{est}:")
            out += _histogram_lines(self.histogram(), self.targets_measured)
            common, common_n = self.target_counts.most_common(1)[0]
            out.append(f"  share with <= {SHORT_TARGET} target tokens: {self.short_share:.1%}; most common length: "
                       f"{common} tokens ({common_n / self.targets_measured:.1%}); mean "
                       f"{self.target_tokens_total / self.targets_measured:.1f}")
        if self.roles:
            out.append("roles: " + ", ".join(f"{r} {n:,}" for r, n in self.roles.most_common()))
            multi = sum(n for t, n in self.turns.items() if t > 2)
            out.append("messages per sample: " + ", ".join(f"{t}: {n:,}" for t, n in sorted(self.turns.items())[:8])
                       + (" ..." if len(self.turns) > 8 else "")
                       + f"; multi-turn: {multi / self.samples:.1%}" if self.samples else "")
        if self.answers_seen:
            top = self.top_answers.most_common(1)
            out.append(f"answers: {self.empty_answers:,} empty, {self.placeholder_answers:,} placeholders "
                       f"({(self.empty_answers + self.placeholder_answers) / self.answers_seen:.1%})"
                       + (f"; most common short answer {top[0][0]!r} x{top[0][1]:,}" if top else "")
                       + ("  (prompts mode: answers will be generated again)" if self.mode == "prompts" else ""))
        if self.mode == "prompts":
            if self.prompt_counts:
                measured = sum(self.prompt_counts.values())
                total = sum(k * n for k, n in self.prompt_counts.items())
                out.append("prompt tokens per sample (estimated from words and punctuation):")
                out += _histogram_lines(_histogram(self.prompt_counts), measured)
                out.append(f"  mean {total / measured:.1f}; longest {max(self.prompt_counts):,}")
            out.append(f"prompts with an empty last user turn: {self.empty_prompts:,}")
        out.append(f"duplicates: {self.duplicates:,} samples repeat an earlier prompt"
                   + (f" ({self.duplicates / self.samples:.1%})" if self.samples else ""))
        out.append(f"duplicate ids: {self.duplicate_ids:,} lines repeat an earlier line's id"
                   + (f" (first: {self.first_duplicate_id}); generate and extract refuse such a file unless "
                      f"--dedupe first" if self.duplicate_ids else ""))
        if self.reasons:
            out.append("DEGENERATE: " + " ".join(self.reasons))
        else:
            out.append("OK: nothing degenerate found.")
        return "\n".join(out)


def _histogram(counts: collections.Counter) -> list[tuple[str, int]]:
    rows = []
    for lo, hi in BUCKETS:
        n = sum(c for k, c in counts.items() if k >= lo and (hi is None or k <= hi))
        label = f"{lo}" if lo == hi else (f"{lo}-{hi}" if hi is not None else f">{lo - 1}")
        rows.append((label, n))
    return rows


def _histogram_lines(rows: list[tuple[str, int]], total: int, width: int = 40) -> list[str]:
    top = max((n for _, n in rows), default=0) or 1
    return [f"  {label:>10} | {'#' * round(width * n / top):<{width}} {n:>10,} {n / total:6.1%}" for label, n in rows]


class _Auditor:
    def __init__(self, path: str, mode: str) -> None:
        self.r = AuditReport(path=path, mode=mode)
        self._seen_prompts: set[int] = set()
        self._seen_ids: set[str] = set()

    def bad(self, line: int, why: str) -> None:
        self.r.bad_lines += 1
        if len(self.r.bad_examples) < 5:
            self.r.bad_examples.append(f"{self.r.path}:{line}: {why}")

    def line(self, raw: bytes, line: int) -> None:
        r = self.r
        r.lines += 1
        if not raw.strip():
            return
        try:
            obj = json.loads(raw)
        except ValueError as exc:
            return self.bad(line, f"not JSON ({exc})")
        if not isinstance(obj, dict):
            return self.bad(line, f"expected a JSON object, got {type(obj).__name__}")
        self.id_seen(obj.get("id"), line)
        try:
            if "input_ids" in obj:
                self.tokenized(obj)
            else:
                self.chat(obj)
        except ValueError as exc:
            return self.bad(line, str(exc))
        r.samples += 1

    def id_seen(self, value: Any, line: int) -> None:
        if value is None:
            return  # known by its line: unique
        rid = value if isinstance(value, str) else json.dumps(value, sort_keys=True)
        if rid in self._seen_ids:
            self.r.duplicate_ids += 1
            if self.r.first_duplicate_id is None:
                self.r.first_duplicate_id = f"{self.r.path}:{line}: id {rid!r}"
        else:
            self._seen_ids.add(rid)

    def target(self, n: int) -> None:
        r = self.r
        r.targets_measured += 1
        r.target_tokens_total += n
        r.target_counts[n] += 1

    def prompt_seen(self, key: bytes) -> None:
        h = _hash(key)
        if h in self._seen_prompts:
            self.r.duplicates += 1
        else:
            self._seen_prompts.add(h)

    def tokenized(self, obj: dict) -> None:
        ids = obj["input_ids"]
        if not isinstance(ids, list):
            raise ValueError("'input_ids' must be a list")
        if "loss_mask" in obj:
            mask = obj["loss_mask"]
            if not isinstance(mask, list) or len(mask) != len(ids):
                raise ValueError(f"'loss_mask' must be a list as long as 'input_ids' ({len(ids)})")
            target = [t for t, m in zip(ids, mask) if m]
            first = next((i for i, m in enumerate(mask) if m), len(ids))
        elif "labels" in obj:
            labels = obj["labels"]
            if not isinstance(labels, list) or len(labels) != len(ids):
                raise ValueError(f"'labels' must be a list as long as 'input_ids' ({len(ids)})")
            target = [t for t in labels if t != -100]
            first = next((i for i, t in enumerate(labels) if t != -100), len(ids))
        else:
            raise ValueError("'input_ids' without 'loss_mask' or 'labels': no way to tell the target")
        self.r.kinds["tokenized"] += 1
        self.target(len(target))
        if len(target) <= SHORT_TARGET * 4 and len(self.r.short_targets) < _MAX_DISTINCT:
            self.r.short_targets[_hash(json.dumps(target).encode())] += 1
        self.prompt_seen(json.dumps(ids[:first]).encode())

    def chat(self, obj: dict) -> None:
        r = self.r
        msgs = to_messages(obj)
        generated = "answer" in obj and "messages" in obj
        r.kinds["generated" if generated else "chat"] += 1
        r.turns[len(msgs) + (1 if generated else 0)] += 1
        for m in msgs:
            r.roles[m.get("role", "?")] += 1
        if generated:
            r.roles["assistant"] += 1
        try:
            context = context_for_last_answer(msgs)
        except ValueError:
            if r.mode == "prompts":
                raise
            context = msgs
        key = json.dumps([(m.get("role"), _text(m.get("content"))) for m in context], ensure_ascii=False)
        self.prompt_seen(key.encode())
        if r.mode == "prompts":
            r.prompt_counts[sum(estimate_tokens(_text(m.get("content"))) for m in context)] += 1
            if not _text(context[-1].get("content")).strip():
                r.empty_prompts += 1
        # the answers: the generated record's, or the assistant turns'
        if generated:
            answers = [(_text(obj.get("answer")), _text(obj.get("reasoning")))]
        else:
            answers = [(_text(m.get("content")), _text(m.get("reasoning_content")))
                       for m in msgs if m.get("role") == "assistant"]
        if not answers:
            r.unanswered += 1
            if r.mode == "training":
                self.target(0)
                r.answers_seen += 1
                r.empty_answers += 1
            return
        total = 0
        for answer, reasoning in answers:
            total += estimate_tokens(answer) + estimate_tokens(reasoning)
        self.target(total)
        # the last answer is the one that counts (the one generate would replace)
        answer, reasoning = answers[-1]
        r.answers_seen += 1
        stripped = answer.strip()
        if not stripped and not reasoning.strip():
            r.empty_answers += 1
        elif stripped.lower() in PLACEHOLDERS or (len(stripped) <= 3 and not reasoning.strip()):
            r.placeholder_answers += 1
        if len(stripped) <= 40 and len(r.top_answers) < _MAX_DISTINCT:
            r.top_answers[stripped] += 1

    def judge(self) -> None:
        r = self.r
        n = r.samples
        if r.bad_lines and r.bad_lines / max(1, r.bad_lines + n) > MAX_BAD_SHARE:
            r.reasons.append(f"{r.bad_lines:,} of {r.bad_lines + n:,} lines cannot be read "
                             f"({r.bad_lines / (r.bad_lines + n):.0%}; first: {r.bad_examples[0]}).")
        if n == 0:
            r.reasons.append("There are no usable samples.")
            return
        if r.duplicates / n > MAX_DUPLICATE_SHARE:
            r.reasons.append(f"{r.duplicates / n:.0%} of samples ({r.duplicates:,} of {n:,}) repeat an earlier prompt.")
        if r.mode == "prompts":
            if r.empty_prompts / n > MAX_EMPTY_PROMPT_SHARE:
                r.reasons.append(f"{r.empty_prompts / n:.0%} of prompts ({r.empty_prompts:,} of {n:,}) have an empty "
                                 f"last user turn: there is nothing to answer.")
            return
        if r.targets_measured:
            short = r.short_share
            if short > MAX_SHORT_SHARE:
                common, common_n = r.target_counts.most_common(1)[0]
                r.reasons.append(
                    f"{short:.0%} of samples ({round(short * r.targets_measured):,} of {r.targets_measured:,}) have at "
                    f"most {SHORT_TARGET} target tokens (the most common length is {common}, in "
                    f"{common_n / r.targets_measured:.0%}): the answers look like placeholders, so training or "
                    f"extraction on them teaches nothing; generate real answers first.")
        if r.answers_seen:
            bad = r.empty_answers + r.placeholder_answers
            if bad / r.answers_seen > MAX_PLACEHOLDER_SHARE:
                top = r.top_answers.most_common(1)
                what = f" (most common: {top[0][0]!r})" if top else ""
                r.reasons.append(f"{bad / r.answers_seen:.0%} of answers ({bad:,} of {r.answers_seen:,}) are empty or "
                                 f"placeholders{what}." + (
                                     f" {r.unanswered:,} samples have no answer at all: prompts to generate answers "
                                     f"for are audited with `gpudeck audit --prompts`." if r.unanswered else ""))
        if r.short_targets:
            h, same = r.short_targets.most_common(1)[0]
            if same / n > MAX_SAME_TARGET_SHARE and same > 1 and not any("placeholders" in x for x in r.reasons):
                r.reasons.append(f"{same / n:.0%} of samples ({same:,}) share one identical short target sequence: "
                                 f"a placeholder answer.")


def audit_file(path: str, mode: str = "training", sample: Optional[int] = None) -> AuditReport:
    """Audit the JSONL file at ``path``. ``sample``: read about that many lines spread evenly
    over the file instead of all of it (what ``generate`` does before a start). Raises
    OSError when the file cannot be read. ``mode="auto"``: ``training``, unless no sample has
    an answer (a prompts file): then ``prompts``, and the report says so."""
    if mode == "auto":
        report = audit_file(path, "training", sample)
        if report.samples and report.unanswered == report.samples:
            report = audit_file(path, "prompts", sample)
            report.recognized = ("a prompts file (no sample has an answer): audited as prompts for `gpudeck "
                                 "generate`, whose answers will be generated")
        return report
    if mode not in ("training", "prompts"):
        raise ValueError(f"mode must be 'training', 'prompts' or 'auto', not {mode!r}")
    a = _Auditor(path, mode)
    with open(path, "rb") as f:
        every = 1
        if sample:
            # a stratified sample over line numbers: unbiased, unlike seeking to byte offsets
            # (which favours lines after long ones); counting newlines costs a read, not a parse
            lines = sum(chunk.count(b"\n") for chunk in iter(lambda: f.read(1 << 20), b""))
            f.seek(0)
            every = max(1, -(-lines // sample))
            a.r.sampled = every > 1
        rng = random.Random(0)  # one line at random in each block of ``every``: no aliasing with
        pick = rng.randrange(every) + 1  # periodic data, and the same sample on every run
        for n, raw in enumerate(f, start=1):
            if n == pick:
                a.line(raw, n)
                block = (n - 1) // every + 1
                pick = block * every + rng.randrange(every) + 1
    a.judge()
    return a.r


# samples already in memory (tests, a worker that holds a batch)
def audit_records(records: list[dict], mode: str = "training", name: str = "<records>") -> AuditReport:
    a = _Auditor(name, mode)
    for i, obj in enumerate(records, start=1):
        a.line(json.dumps(obj).encode(), i)
    a.judge()
    return a.r


__all__ = ["AuditReport", "audit_file", "audit_generate_dir", "audit_generate_s3", "generate_shards_in", "s3_listing",
           "render_generate_quality", "audit_records", "estimate_tokens", "s3_inventory", "ROLES", "SHORT_TARGET"]
