"""What the simulated server answers to one chat request: its length is drawn from the
prompt's hash and its words from a seeded generator, so the same prompt always gets the same
answer, streamed or not. A token is a word; streamed, each delta is one token (the words
after the first keep their leading space, so the deltas join into the plain answer)."""

from __future__ import annotations

import random
import zlib
from dataclasses import dataclass
from typing import Iterator, Optional

from .decode import output_length

_WORDS = ("the", "model", "token", "answer", "prompt", "data", "shard", "reason", "step", "check", "value",
          "result", "so", "we", "need", "first", "then", "compute", "because", "thus", "list", "sum", "code",
          "test", "function", "return", "loop", "state", "case", "first", "second", "next", "done", "ok")


@dataclass
class Answer:
    model: str
    seed: int
    prompt_tokens: int
    thinking: bool
    finish: str
    reasoning_words: list[str]
    answer_words: list[str]

    @property
    def n_reason(self) -> int:
        return len(self.reasoning_words)

    @property
    def n_out(self) -> int:
        return len(self.reasoning_words) + len(self.answer_words)

    @property
    def held(self) -> int:
        """KV-cache tokens the request holds while it runs."""
        return self.prompt_tokens + self.n_out

    @property
    def reasoning(self) -> Optional[str]:
        return " ".join(self.reasoning_words) if self.thinking else None

    @property
    def answer(self) -> str:
        return " ".join(self.answer_words)

    def id(self, n: int) -> str:
        return f"sim-{self.seed:08x}-{n}"

    def usage(self) -> dict:
        usage = {"prompt_tokens": self.prompt_tokens, "completion_tokens": self.n_out,
                 "total_tokens": self.prompt_tokens + self.n_out}
        if self.thinking:
            usage["reasoning_tokens"] = self.n_reason
        return usage

    def deltas(self) -> Iterator[tuple[str, str]]:
        """(field, text) per token: ``reasoning_content`` first (as SGLang's reasoning parser
        separates it), then ``content``."""
        for name, words in (("reasoning_content", self.reasoning_words), ("content", self.answer_words)):
            for i, w in enumerate(words):
                yield name, (w if i == 0 else " " + w)


def plan_answer(body: dict, out_tokens: tuple[int, int], model: str, median: Optional[float] = None,
                sigma: float = 1.0) -> Answer:
    messages = body["messages"]
    prompt_text = "".join(str(m.get("content") or "") for m in messages if isinstance(m, dict))
    prompt_tokens = max(1, len(prompt_text.split()))
    seed = zlib.crc32(prompt_text.encode())
    lo, hi = out_tokens
    n_total = output_length(seed, lo, hi, median, sigma)
    kwargs = body.get("chat_template_kwargs") or {}
    thinking = kwargs.get("enable_thinking", True) is not False
    n_reason = n_total // 2 if thinking else 0
    n_answer = n_total - n_reason
    max_tokens = body.get("max_tokens") or body.get("max_completion_tokens")
    finish = "stop"
    if isinstance(max_tokens, int) and max_tokens < n_total:
        finish = "length"
        n_reason = min(n_reason, max_tokens)
        n_answer = max_tokens - n_reason
    words = random.Random(seed)
    reasoning = [words.choice(_WORDS) for _ in range(n_reason)] if thinking else []
    answer = [words.choice(_WORDS) for _ in range(n_answer)]
    return Answer(model=body.get("model") or model, seed=seed, prompt_tokens=prompt_tokens, thinking=thinking,
                  finish=finish, reasoning_words=reasoning, answer_words=answer)


JUNK_KINDS = ("cut", "empty", "no-answer", "loop")
_LOOP = ("so", "we", "need", "to", "check", "the", "value", "again", "and")  # a loop's phrase: 40 characters


def spoil(ans: Answer, kind: str, max_tokens: Optional[int]) -> Answer:
    """``ans`` turned into junk of ``kind`` (``--junk``): ``cut``, a thinking trace that runs
    past ``max_tokens`` (``finish_reason`` length, no answer); ``empty``, nothing at all;
    ``no-answer``, reasoning and no answer; ``loop``, an answer that repeats one phrase to its
    end (at least 250 tokens, past the 1,000 characters the repetition test reads; cut at
    ``max_tokens`` when that is fewer)."""
    words = random.Random(ans.seed ^ 0x5EED)
    if kind == "cut":
        n = max_tokens if isinstance(max_tokens, int) and max_tokens > 0 else max(ans.n_out, 1)
        ans.thinking, ans.finish = True, "length"
        ans.reasoning_words, ans.answer_words = [words.choice(_WORDS) for _ in range(n)], []
    elif kind == "empty":
        ans.finish, ans.reasoning_words, ans.answer_words = "stop", [], []
    elif kind == "no-answer":
        ans.thinking, ans.finish = True, "stop"
        ans.reasoning_words = ans.reasoning_words or [words.choice(_WORDS) for _ in range(max(ans.n_out, 8))]
        ans.answer_words = []
    elif kind == "loop":
        n = max(250, len(ans.answer_words))
        cut = isinstance(max_tokens, int) and 0 < max_tokens < n + len(ans.reasoning_words)
        if cut and isinstance(max_tokens, int):
            n = max(0, max_tokens - len(ans.reasoning_words))
        ans.answer_words = [_LOOP[i % len(_LOOP)] for i in range(n)]
        ans.finish = "length" if cut else "stop"
    else:
        raise ValueError(f"--junk: unknown kind {kind!r}; expected one of {', '.join(JUNK_KINDS)}")
    return ans

