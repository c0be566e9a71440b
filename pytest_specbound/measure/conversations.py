"""Recorded conversations as prompts, read as the peers' benchmarks read them.

A conversation is ShareGPT's ``conversations`` (``from``: human / user / gpt / chatgpt / bing /
bard / system, ``value``) or OpenAI's ``messages`` ending on the assistant's reply (``role``,
``content``). By default (``turns = "first"``, as ``vllm bench serve --dataset-name sharegpt``
and SGLang's ``bench_serving`` do) the first non-empty human turn is the prompt and the reply
after it sets the request's output length; a system turn before it is kept. Empty turns and a
leading assistant turn are passed over, not fatal. The peers' length filters apply: a prompt
or reply under 4 tokens, a prompt over 1024, or both over 2048 is skipped.

``turns = "replay"`` (or a count) keeps the later human turns: the sampler replays the earlier
ones with the server's own answers, unmeasured, and measures the last.

Token counts here are estimated at :data:`CHARS_PER_TOKEN` characters per token (no model
tokenizer is loaded, and nothing is downloaded); the peers count with the model's tokenizer.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from pytest_specbound.serving.backends.base import Prompt

ROLES = {"human": "user", "user": "user", "gpt": "assistant", "chatgpt": "assistant",
         "bing": "assistant", "bard": "assistant", "assistant": "assistant",
         "model": "assistant", "system": "system"}
CHARS_PER_TOKEN = 4.0  # English text in BPE vocabularies (OpenAI's rule of thumb)
MIN_TOKENS, MAX_PROMPT_TOKENS, MAX_TOTAL_TOKENS = 4, 1024, 2048  # vllm bench serve's filters

NO_HUMAN = "no human turn"
NO_REPLY = "no reply after the first human turn"
TOO_SHORT = "prompt or reply under 4 tokens"
TOO_LONG = "prompt over 1024 tokens or prompt and reply over 2048"
NOT_A_LIST = "turns not a list"


@dataclass(frozen=True)
class Turns:
    """How many of a conversation's human turns a request uses: the first only (the peers'
    convention), all of them (``replay``), or up to a count; the last one used is measured."""

    keep: int | None = 1  # None: all

    @classmethod
    def parse(cls, value: object) -> Turns:
        if value in (None, "first"):
            return cls(1)
        if value == "replay":
            return cls(None)
        if isinstance(value, int) and not isinstance(value, bool) and value >= 1:
            return cls(value)
        raise ValueError(f"\"first\", \"replay\" or a count of human turns (1 or more), "
                         f"got {value!r}")

    @property
    def first_only(self) -> bool:
        return self.keep == 1

    def describe(self) -> str:
        return "first" if self.keep == 1 else "replay" if self.keep is None else str(self.keep)


def estimated_tokens(text: str) -> int:
    return math.ceil(len(text) / CHARS_PER_TOKEN)


def is_conversation(obj: dict[str, Any]) -> bool:
    """ShareGPT's ``conversations``, or ``messages`` whose last turn is the assistant's (a
    recorded exchange; ``messages`` ending on the user's turn is a prompt sent as it is)."""
    if "conversations" in obj or "conversation" in obj:
        return True
    msgs = obj.get("messages")
    return isinstance(msgs, list) and bool(msgs) and isinstance(msgs[-1], dict) \
        and ROLES.get(str(msgs[-1].get("role"))) == "assistant"


def conversation_prompt(obj: dict[str, Any], turns: Turns, category: str | None,
                        output_len: int | None = None) -> Prompt | str:
    """The request a conversation makes, or why it is skipped (one of the reasons above).
    ``output_len``: the class's own output length instead of the reply's (as
    ``--sharegpt-output-len`` does; the reply then need not be 4 tokens long)."""
    raw = obj.get("conversations", obj.get("conversation", obj.get("messages")))
    if not isinstance(raw, list):
        return NOT_A_LIST
    said = _said(raw)
    humans = [i for i, (role, _) in enumerate(said) if role == "user"]
    if not humans:
        return NO_HUMAN
    first = humans[0]
    system = [{"role": "system", "content": text} for role, text in said[:first]
              if role == "system"][:1]
    prompt = said[first][1]
    messages = (*system, {"role": "user", "content": prompt})
    if not turns.first_only:
        later = tuple(said[i][1] for i in humans[1:])
        if turns.keep is not None:
            later = later[:turns.keep - 1]
        return Prompt(messages=messages, follow_ups=later, category=category)
    reply = next((text for role, text in said[first + 1:] if role == "assistant"), None)
    if reply is None:
        return NO_REPLY
    prompt_len = estimated_tokens(prompt)
    reply_len = estimated_tokens(reply) if output_len is None else output_len
    if prompt_len < MIN_TOKENS or (output_len is None and reply_len < MIN_TOKENS):
        return TOO_SHORT
    if prompt_len > MAX_PROMPT_TOKENS or prompt_len + reply_len > MAX_TOTAL_TOKENS:
        return TOO_LONG
    return Prompt(messages=messages, max_tokens=None if output_len else reply_len,
                  category=category)


def _said(raw: Sequence[Any]) -> list[tuple[str, str]]:
    """(role, text) of each turn with a known role and non-empty text, in order."""
    out = []
    for turn in raw:
        if not isinstance(turn, dict):
            continue
        role = ROLES.get(str(turn.get("from", turn.get("role", ""))).lower())
        text = turn.get("value", turn.get("content"))
        if role and isinstance(text, str) and text.strip():
            out.append((role, text))
    return out
