"""Prompt sets from the user's files: plain JSONL (``prompt`` / ``messages``), MT-bench's
question format (``category``, ``turns``; SPEED-Bench's is the same shape), and recorded
conversations (ShareGPT's ``conversations``, OpenAI ``messages`` ending on the reply: read as
:mod:`~pytest_specbound.measure.conversations` says), as JSONL or one JSON array, read one
entry at a time (:mod:`~pytest_specbound.measure.json_stream`).

MT-bench's questions replay their earlier turns by default (the set is built for the second
turn); a conversation gives its first human turn unless the class asks ``turns = "replay"``.
A conversation that gives no request is skipped and counted; a plain entry that cannot be
read is an error (it is the user's own file: a typo)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from pytest_specbound.errors import ConfigError
from pytest_specbound.measure.conversations import (
    CHARS_PER_TOKEN,
    Turns,
    conversation_prompt,
    is_conversation,
)
from pytest_specbound.serving.backends.base import Prompt

FORMATS = ("prompt/messages JSONL, MT-bench (category, turns) or ShareGPT (conversations) / "
           "OpenAI messages")
PLAIN_KEYS = {"prompt", "messages", "max_tokens", "category"}


@dataclass(frozen=True)
class PromptSet:
    """A file's prompts and what reading it decided: conversations skipped (by reason), and
    how a conversation's turns were used."""

    prompts: tuple[Prompt, ...]
    entries: int = 0
    conversations: int = 0  # of the entries
    skipped: dict[str, int] = field(default_factory=dict)  # by reason, the most common first
    turns: Turns | None = None  # how conversations (and MT-bench questions) were read
    reply_lengths: bool = True  # a conversation's first reply set its output length

    @property
    def unmeasured_per_request(self) -> float:
        """Earlier turns replayed, unmeasured, per measured request (each a generation)."""
        return sum(len(p.follow_ups) for p in self.prompts) / len(self.prompts) \
            if self.prompts else 0.0

    def notes(self) -> list[str]:
        """What was skipped and how turns were used, one line each."""
        out = []
        if self.skipped:
            reasons = ", ".join(f"{why} {n:,}" for why, n in self.skipped.items())
            out.append(f"skipped {sum(self.skipped.values()):,} of {self.conversations:,} "
                       f"conversations: {reasons}")
        if self.conversations and self.turns is not None and self.turns.first_only:
            length = (f"its reply's length (about {CHARS_PER_TOKEN:g} characters a token) "
                      "the output length" if self.reply_lengths
                      else "the class's max_tokens the output length")
            out.append(f"each conversation's first human turn is the prompt and {length}, as "
                       "vllm bench serve reads ShareGPT; turns = \"replay\" replays the later "
                       "turns")
        cost = self.unmeasured_per_request
        if cost:
            why = "" if self.turns is not None else \
                " (MT-bench's questions replay their earlier turns: the set is built for the " \
                "second; turns = \"first\" measures the first alone)"
            out.append(f"earlier turns replayed before each measured request: {cost:.2f} "
                       f"unmeasured generations per request on average{why}")
        return out

    def to_json(self) -> dict[str, object]:
        return {"prompts": len(self.prompts), "entries": self.entries,
                "conversations": self.conversations, "skipped": dict(self.skipped),
                "turns": self.turns.describe() if self.turns else None,
                "unmeasured_per_request": round(self.unmeasured_per_request, 3),
                "notes": self.notes()}


def read_set(entries: Iterable[tuple[str, Any]], origin: str, turns: object = None,
             other_keys: bool = False, output_len: int | None = None) -> PromptSet:
    """The prompts of ``entries`` ((where, object) pairs); ``turns`` is the class's setting
    (None: each format's default); ``output_len``, the class's own output length where it
    gives one (a conversation's reply then sets none). An error where nothing usable is
    left."""
    shape = Turns.parse(turns) if turns is not None else None
    prompts: list[Prompt] = []
    skipped: Counter[str] = Counter()
    count = conversations = 0
    for where, obj in entries:
        count += 1
        if isinstance(obj, dict) and is_conversation(obj):
            conversations += 1
            made = conversation_prompt(obj, shape or Turns(1), _category(obj), output_len)
            if isinstance(made, str):
                skipped[made] += 1
            else:
                prompts.append(made)
            continue
        prompts.append(to_prompt(obj, where, other_keys, shape))
    if not prompts:
        why = f" (skipped {sum(skipped.values()):,} conversations: " + ", ".join(
            f"{r} {n:,}" for r, n in skipped.most_common()) + ")" if skipped else ""
        raise ConfigError(f"{origin}: no usable prompts in the file{why}")
    used = shape or (Turns(1) if conversations else None)
    return PromptSet(tuple(prompts), count, conversations, dict(skipped.most_common()), used,
                     reply_lengths=output_len is None)


def to_prompt(obj: Any, where: str, other_keys: bool = False, turns: Turns | None = None
              ) -> Prompt:
    """One entry as a prompt (with follow-up turns where it has them and ``turns`` keeps
    them). ``other_keys``: a plain entry may carry columns of its own (a hub dataset's ids and
    references); a file's unknown key is an error (a typo)."""
    if not isinstance(obj, dict):
        raise ConfigError(f"{where}: expected an object ({FORMATS})")
    category = _category(obj)
    if is_conversation(obj):
        made = conversation_prompt(obj, turns or Turns(1), category)
        if isinstance(made, str):
            raise ConfigError(f"{where}: no request in this conversation: {made}")
        return made
    if "turns" in obj:
        return _turns(obj.get("turns"), category, where, "turns", turns)
    if isinstance(obj.get("prompt"), list):  # the hub's MT-bench (HuggingFaceH4): a list of turns
        return _turns(obj["prompt"], category, where, "prompt", turns)
    unknown = set(obj) - PLAIN_KEYS
    if unknown and not other_keys:
        raise ConfigError(f"{where}: unknown key '{sorted(unknown)[0]}'; valid: prompt, "
                          f"messages, max_tokens, category (or {FORMATS})")
    return _plain({k: v for k, v in obj.items() if k in PLAIN_KEYS}, category, where)


def _category(obj: dict[str, Any]) -> str | None:
    category = obj.get("category")
    return str(category) if category is not None else None


def _turns(turns: Any, category: str | None, where: str, key: str,
           shape: Turns | None) -> Prompt:
    """MT-bench's questions: every turn by default (earlier ones replayed)."""
    if not isinstance(turns, list) or not turns or \
            not all(isinstance(t, str) and t for t in turns):
        raise ConfigError(f"{where}: key '{key}' must hold one or more non-empty user turns")
    keep = len(turns) if shape is None or shape.keep is None else shape.keep
    return Prompt(messages=({"role": "user", "content": turns[0]},),
                  follow_ups=tuple(turns[1:keep]), category=category)


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
