"""The extraction's input: streamed records turned into (id, input_ids, loss_mask), then
packed into batches by length.

Two record shapes, told apart line by line:

- tokenized: ``{"input_ids": [...], "loss_mask": [...], "id"?: ...}``;
- chat, as the generation worker writes them: ``{"id", "messages", "reasoning", "answer", ...}``
  where ``messages`` is the prompt (up to the last user turn) and ``reasoning``/``answer``
  the regenerated reply. A chat record without ``answer`` whose last message is the
  assistant's is accepted too (its ``reasoning_content`` is the reasoning). The model's chat
  template renders the conversation; the loss mask covers the reply's tokens (reasoning,
  answer and end-of-turn) and nothing of the prompt, the generation header included.

A sample's id is the record's ``id``; a record without one is ``<file name>:<line>``.
Every mistake names the file and the line.
"""

from __future__ import annotations

import glob
import json
import os
from dataclasses import dataclass, field
from typing import Any, Iterable, Iterator, Optional

import numpy as np


class DataError(ValueError):
    """Bad input: ``str()`` is ``file:line: what is wrong``."""


@dataclass
class Prepared:
    """One sample ready for the model."""
    id: str
    input_ids: np.ndarray  # int32 [n]
    loss_mask: np.ndarray  # uint8 [n]
    where: str = ""  # file:line, for messages
    partial: bool = False  # longer than the limit the encoder was given: only its first tokens are here
    full_n: int = 0  # a partial sample's whole length, when known (0: not tokenized that far)

    @property
    def n(self) -> int:
        return int(self.input_ids.shape[0])


def input_files(data: str) -> list[str]:
    """The JSONL files to read: ``data`` itself, or the generation worker's closed shards
    (``shard-*.jsonl``) in the directory ``data`` (any ``*.jsonl`` if it holds none), in
    name order. Temp and hidden files are never read."""
    if os.path.isdir(data):
        files = sorted(glob.glob(os.path.join(data, "shard-*.jsonl"))) or \
            sorted(glob.glob(os.path.join(data, "*.jsonl")))
        files = [f for f in files if not os.path.basename(f).startswith(".")]
        if not files:
            raise DataError(f"{data}: no shard-*.jsonl or *.jsonl files in this directory")
        return files
    if not os.path.exists(data):
        raise DataError(f"{data}: no such file or directory")
    return [data]


def count_records(files: Iterable[str]) -> int:
    """Non-empty lines of the files (no JSON parsing): the total for progress and the disk
    projection, counted in a background thread while the work starts."""
    total = 0
    for path in files:
        with open(path, "rb") as f:
            total += sum(1 for line in f if not line.isspace())
    return total


def iter_lines(files: Iterable[str]) -> Iterator[tuple[str, int, dict]]:
    """(file, line number, record) for every non-empty line, streamed."""
    for path in files:
        with open(path, "rb") as f:
            for lineno, raw in enumerate(f, 1):
                if not raw.strip():
                    continue
                yield path, lineno, parse_object_line(raw, path, lineno)


def parse_object_line(raw: bytes, path: str, lineno: int) -> dict:
    """One JSONL line that must be an object; DataError names the file and line."""
    try:
        obj = json.loads(raw)
    except ValueError as exc:
        raise DataError(f"{path}:{lineno}: not valid JSON: {exc}") from None
    if not isinstance(obj, dict):
        raise DataError(f"{path}:{lineno}: expected a JSON object, got {type(obj).__name__}")
    return obj


def record_id(path: str, lineno: int, obj: dict) -> str:
    rid = obj.get("id")
    if rid is None:
        return f"{os.path.basename(path)}:{lineno}"
    return rid if isinstance(rid, str) else json.dumps(rid)


class Encoder:
    """Turns a record into token ids and a loss mask."""

    def __init__(self, tokenizer=None, chat_template: Optional[str] = None) -> None:
        self.tok = tokenizer
        self.template = chat_template
        if tokenizer is not None and chat_template is None and not getattr(tokenizer, "chat_template", None):
            self._no_template = True
        else:
            self._no_template = False
        tpl = chat_template or (getattr(tokenizer, "chat_template", None) if tokenizer is not None else None)
        if isinstance(tpl, dict):  # several named templates: the default one
            tpl = tpl.get("default") or next(iter(tpl.values()))
        self._template_knows_reasoning = tpl is not None and bool(tpl) and "reasoning_content" in tpl

    def encode(self, path: str, lineno: int, obj: dict, limit: Optional[int] = None) -> Prepared:
        """The sample of one record. With ``limit``, a sample longer than that is not
        tokenized whole: it comes back with more than ``limit`` exact first tokens and
        ``partial`` set (the caller truncates or refuses it), so one huge record costs no
        more memory or time than a few long ones."""
        where = f"{path}:{lineno}"
        rid = record_id(path, lineno, obj)
        if "input_ids" in obj:
            return self._tokenized(where, rid, obj, limit)
        if "messages" in obj:
            return self._chat(where, rid, obj, limit)
        raise DataError(f"{where}: expected a tokenized record (input_ids, loss_mask) or a chat record "
                        f"(messages, answer); got keys {', '.join(sorted(obj)) or 'none'}")

    @staticmethod
    def _tokenized(where: str, rid: str, obj: dict, limit: Optional[int] = None) -> Prepared:
        ids, mask = obj.get("input_ids"), obj.get("loss_mask")
        if not isinstance(ids, list) or not ids:
            raise DataError(f"{where}: 'input_ids' must be a non-empty list of integers")
        if mask is None:
            raise DataError(f"{where}: a tokenized record needs 'loss_mask' beside 'input_ids'")
        if not isinstance(mask, list) or len(mask) != len(ids):
            raise DataError(f"{where}: 'loss_mask' must be a list as long as 'input_ids' "
                            f"({len(mask) if isinstance(mask, list) else type(mask).__name__} vs {len(ids)})")
        full_n = len(ids)
        partial = limit is not None and full_n > limit + 1
        if partial and limit is not None:
            ids, mask = ids[:limit + 1], mask[:limit + 1]
        try:
            a = np.asarray(ids, dtype=np.int64)
            m = np.asarray(mask, dtype=np.int64)
        except (TypeError, ValueError, OverflowError):
            raise DataError(f"{where}: 'input_ids' and 'loss_mask' must hold integers") from None
        if a.ndim != 1 or m.ndim != 1:
            raise DataError(f"{where}: 'input_ids' and 'loss_mask' must be flat lists")
        if a.min() < 0 or a.max() >= 2**31:
            raise DataError(f"{where}: token ids must be in [0, 2^31)")
        if not np.isin(m, (0, 1)).all():
            raise DataError(f"{where}: 'loss_mask' must hold only 0 and 1")
        return Prepared(rid, a.astype(np.int32), m.astype(np.uint8), where, partial, full_n if partial else 0)

    def _chat(self, where: str, rid: str, obj: dict, limit: Optional[int] = None) -> Prepared:
        if self.tok is None:
            raise DataError(f"{where}: a chat record needs a tokenizer with a chat template (none was loaded)")
        if self._no_template:
            raise DataError(f"{where}: the tokenizer has no chat template; pass --chat-template FILE")
        messages = obj["messages"]
        if not isinstance(messages, list) or not messages or not all(isinstance(m, dict) for m in messages):
            raise DataError(f"{where}: 'messages' must be a non-empty list of objects")
        if "answer" in obj:
            answer, reasoning = obj.get("answer"), obj.get("reasoning")
            prompt = list(messages)
        elif messages[-1].get("role") == "assistant":
            answer = messages[-1].get("content")
            reasoning = messages[-1].get("reasoning_content")
            prompt = list(messages[:-1])
        else:
            raise DataError(f"{where}: a chat record needs 'answer' or a last message from the assistant")
        if not isinstance(answer, str):
            raise DataError(f"{where}: the answer must be a string, got {type(answer).__name__}")
        if reasoning is not None and not isinstance(reasoning, str):
            raise DataError(f"{where}: 'reasoning' must be a string or null")
        if not prompt:
            raise DataError(f"{where}: no prompt before the answer")
        reply: dict = {"role": "assistant", "content": answer}
        if reasoning:
            if self._template_knows_reasoning:
                reply["reasoning_content"] = reasoning
            else:  # a template that drops reasoning_content: keep the reasoning in the text
                reply["content"] = f"<think>\n{reasoning}\n</think>\n\n{answer}"
        kw: dict[str, Any] = {"tokenize": False}
        if self.template:
            kw["chat_template"] = self.template
        try:
            head = self.tok.apply_chat_template(prompt, add_generation_prompt=True, **kw)
            full = self.tok.apply_chat_template(prompt + [reply], add_generation_prompt=False, **kw)
        except Exception as exc:  # jinja errors come in many types; say where
            raise DataError(f"{where}: the chat template failed: {type(exc).__name__}: {exc}") from None
        # the reply starts where the rendered prompt (with its generation header) ends
        cut = len(os.path.commonprefix([head, full]))
        enc, partial = self._tokenize(full, limit)
        ids = enc["input_ids"]
        if not ids:
            raise DataError(f"{where}: the conversation renders to no tokens")
        mask = np.fromiter((1 if end > cut else 0 for _, end in enc["offset_mapping"]), dtype=np.uint8,
                           count=len(ids))
        return Prepared(rid, np.asarray(ids, dtype=np.int32), mask, where, partial)

    def _tokenize(self, text: str, limit: Optional[int]) -> tuple[dict, bool]:
        """The tokens of ``text``; with ``limit``, of growing prefixes of it until one gives
        more than ``limit`` tokens (then its last few, which the cut may have changed, are
        dropped and the result is partial) or the prefix is the whole text."""
        kw = {"add_special_tokens": False, "return_offsets_mapping": True}
        if limit is not None:
            margin = 16
            k = (limit + 4 * margin) * 8
            while k < len(text):
                enc = self.tok(text[:k], **kw)
                if len(enc["input_ids"]) > limit + margin:
                    keep = len(enc["input_ids"]) - margin
                    return {"input_ids": enc["input_ids"][:keep], "offset_mapping": enc["offset_mapping"][:keep]}, True
                k *= 4
        return self.tok(text, **kw), False


@dataclass
class Batch:
    samples: list[Prepared]
    seq: int  # padded length

    @property
    def real_tokens(self) -> int:
        return sum(s.n for s in self.samples)


@dataclass
class Batcher:
    """Packs samples into right-padded batches of at most ``budget`` tokens (batch size x
    padded length): samples are gathered in a window of several batches, sorted by length
    and cut greedily, so padding stays small without reading the whole input."""
    budget: int
    window_batches: int = 8
    multiple: int = 8
    _pending: list[Prepared] = field(default_factory=list)
    _pending_tokens: int = 0

    def add(self, s: Prepared) -> list[Batch]:
        self._pending.append(s)
        self._pending_tokens += s.n
        if self._pending_tokens >= self.budget * self.window_batches:
            return self._cut()
        return []

    def flush(self) -> list[Batch]:
        return self._cut() if self._pending else []

    def _pad(self, n: int) -> int:
        return -(-n // self.multiple) * self.multiple

    def _cut(self) -> list[Batch]:
        items = sorted(self._pending, key=lambda s: s.n, reverse=True)
        self._pending, self._pending_tokens = [], 0
        out: list[Batch] = []
        cur: list[Prepared] = []
        seq = 0
        for s in items:
            # sorted longest first: the first sample of a batch sets its padded length
            if cur and (len(cur) + 1) * seq > self.budget:
                out.append(Batch(cur, seq))
                cur = []
            if not cur:
                seq = self._pad(s.n)
            cur.append(s)
        if cur:
            out.append(Batch(cur, seq))
        return out
