"""Prompt sets from the user's files: plain JSONL (``prompt`` / ``messages``), MT-bench's
question format (``category``, ``turns``; SPEED-Bench's is the same shape), and ShareGPT
conversations (``conversations``: ``from`` human / gpt, ``value``), as JSONL or one JSON
array. Multi-turn entries keep their later user turns as follow-ups: the sampler replays the
earlier turns with the server's own answers and measures the last one."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from pytest_specbound.errors import ConfigError
from pytest_specbound.serving.backends.base import Prompt

FORMATS = "prompt/messages JSONL, MT-bench (category, turns) or ShareGPT (conversations)"
PLAIN_KEYS = {"prompt", "messages", "max_tokens", "category"}
HUMAN = ("human", "user")


def entries(text: str, origin: str) -> list[tuple[str, Any]]:
    """(where, object) per entry: JSONL lines, or the items of one JSON array."""
    stripped = text.lstrip()
    if stripped.startswith("["):
        try:
            items = json.loads(text)
        except ValueError as exc:
            raise ConfigError(f"{origin}: invalid JSON: {exc}") from None
        return [(f"{origin}[{i}]", obj) for i, obj in enumerate(items)]
    out = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            out.append((f"{origin}:{number}", json.loads(line)))
        except ValueError as exc:
            raise ConfigError(f"{origin}:{number}: invalid JSON: {exc}") from None
    return out


def to_prompt(obj: Any, where: str, other_keys: bool = False) -> Prompt:
    """One entry in any of the formats as a prompt (with follow-up turns where it has them).
    ``other_keys``: a plain entry may carry columns of its own (a hub dataset's ids and
    references); a file's unknown key is an error (a typo)."""
    if not isinstance(obj, dict):
        raise ConfigError(f"{where}: expected an object ({FORMATS})")
    category = obj.get("category")
    category = str(category) if category is not None else None
    if "turns" in obj:
        return _turns(obj.get("turns"), category, where, "turns")
    if isinstance(obj.get("prompt"), list):  # the hub's MT-bench (HuggingFaceH4): a list of turns
        return _turns(obj["prompt"], category, where, "prompt")
    if "conversations" in obj or "conversation" in obj:
        conv = obj.get("conversations", obj.get("conversation"))
        if not isinstance(conv, list):
            raise ConfigError(f"{where}: key 'conversations' must be a list")
        humans = [c.get("value") for c in conv if isinstance(c, dict) and c.get("from") in HUMAN]
        return _turns(humans, category, where, "conversations")
    unknown = set(obj) - PLAIN_KEYS
    if unknown and not other_keys:
        raise ConfigError(f"{where}: unknown key '{sorted(unknown)[0]}'; valid: prompt, "
                          f"messages, max_tokens, category (or {FORMATS})")
    return _plain({k: v for k, v in obj.items() if k in PLAIN_KEYS}, category, where)


def _turns(turns: Any, category: str | None, where: str, key: str) -> Prompt:
    if not isinstance(turns, list) or not turns or \
            not all(isinstance(t, str) and t for t in turns):
        raise ConfigError(f"{where}: key '{key}' must hold one or more non-empty user turns")
    return Prompt(messages=({"role": "user", "content": turns[0]},),
                  follow_ups=tuple(turns[1:]), category=category)


def _plain(obj: dict[str, Any], category: str | None, where: str) -> Prompt:
    max_tokens = obj.get("max_tokens")
    if max_tokens is not None and (not isinstance(max_tokens, int) or max_tokens < 1):
        raise ConfigError(f"{where}: key 'max_tokens' must be a positive integer")
    if isinstance(obj.get("prompt"), str) and obj["prompt"]:
        return Prompt(text=obj["prompt"], max_tokens=max_tokens, category=category)
    msgs = obj.get("messages")
    if isinstance(msgs, list) and msgs:
        if not all(isinstance(m, dict) and "role" in m and "content" in m for m in msgs):
            raise ConfigError(f"{where}: key 'messages' must be a list of "
                              "{\"role\", \"content\"} objects")
        return Prompt(messages=tuple(msgs), max_tokens=max_tokens, category=category)
    raise ConfigError(f"{where}: needs a non-empty 'prompt' string or 'messages' list "
                      f"(or {FORMATS})")


def select(prompts: Sequence[Prompt], categories: Sequence[str] | None,
           origin: str) -> list[Prompt]:
    """The prompts of the given categories (all without a selection); none matching is an
    error naming the categories the file has."""
    if not categories:
        return list(prompts)
    chosen = [p for p in prompts if p.category in categories]
    if not chosen:
        have = sorted({p.category for p in prompts if p.category})
        raise ConfigError(f"{origin}: no prompts in categories {', '.join(categories)}; the file "
                          f"has: {', '.join(have) or 'no categories'}")
    return chosen
