"""The conversation shapes of JSONL records, for every program that reads chat data (the
generation worker's prompts, the audit):

    {"messages": [{"role": "user", "content": "..."}, ...]}         OpenAI chat
    {"conversations": [{"from": "human", "value": "..."}, ...]}     ShareGPT
    {"prompt": "..."}                                               a bare prompt

Speaker names are mapped to OpenAI roles through :data:`ROLES`.
"""

from __future__ import annotations

from typing import Any

ROLES = {
    "user": "user", "human": "user", "prompter": "user",
    "assistant": "assistant", "gpt": "assistant", "chatgpt": "assistant", "bard": "assistant", "bing": "assistant",
    "model": "assistant", "system": "system", "tool": "tool", "function": "tool", "observation": "tool",
    "function_response": "tool", "ipython": "tool",
}


def to_messages(obj: Any) -> list[dict]:
    """The conversation of one JSONL object as OpenAI chat messages. Raises ValueError."""
    if not isinstance(obj, dict):
        raise ValueError(f"expected a JSON object, got {type(obj).__name__}")
    if "messages" in obj:
        msgs = obj["messages"]
        if not isinstance(msgs, list):
            raise ValueError("'messages' must be a list")
        out = []
        for i, m in enumerate(msgs):
            if not isinstance(m, dict) or not isinstance(m.get("role"), str):
                raise ValueError(f"messages[{i}] needs a string 'role'")
            role = ROLES.get(m["role"].lower())
            if role is None:
                raise ValueError(f"messages[{i}]: unknown role {m['role']!r}")
            if role != m["role"]:
                m = {**m, "role": role}
            out.append(m)
        return out
    if "conversations" in obj:
        conv = obj["conversations"]
        if not isinstance(conv, list):
            raise ValueError("'conversations' must be a list")
        out = []
        for i, turn in enumerate(conv):
            if not isinstance(turn, dict):
                raise ValueError(f"conversations[{i}] must be an object")
            who = turn.get("from", turn.get("role"))
            role = ROLES.get(str(who).lower()) if who is not None else None
            if role is None:
                raise ValueError(f"conversations[{i}]: unknown speaker {who!r}")
            value = turn.get("value", turn.get("content"))
            if not isinstance(value, str):
                raise ValueError(f"conversations[{i}] needs a string 'value'")
            out.append({"role": role, "content": value})
        return out
    if isinstance(obj.get("prompt"), str):
        return [{"role": "user", "content": obj["prompt"]}]
    raise ValueError("no 'messages', 'conversations' or 'prompt'")


def context_for_last_answer(messages: list[dict]) -> list[dict]:
    """The messages up to and including the last user turn. Raises ValueError without one."""
    for i in range(len(messages) - 1, -1, -1):
        if messages[i].get("role") == "user":
            return messages[:i + 1]
    raise ValueError("no user turn")
