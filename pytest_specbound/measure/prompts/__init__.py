"""Built-in prompt classes (package data) and the loader for user JSONL prompt sets."""

from __future__ import annotations

import json
from importlib import resources
from pathlib import Path
from typing import Any

from pytest_specbound._toml import read_text
from pytest_specbound.errors import ConfigError
from pytest_specbound.serving.backends.base import Prompt

BUILTIN = ("coding", "chat", "repetitive", "long")
DEFAULT_MAX_TOKENS = {"coding": 256, "chat": 256, "repetitive": 256, "long": 128}


def load_prompts(name: str, origin: str = "prompts") -> list[Prompt]:
    """A built-in class name, or a path to a JSONL file of ``{"prompt"}`` / ``{"messages"}``."""
    if name in BUILTIN:
        text = resources.files(__package__).joinpath(f"{name}.jsonl").read_text("utf-8")
        return _parse(text, f"pytest_specbound/prompts/{name}.jsonl")
    path = Path(name)
    if path.suffix != ".jsonl" and not path.exists():
        raise ConfigError(
            f"{origin}={name!r}: unknown prompt set; valid: {', '.join(BUILTIN)} or a .jsonl file"
        )
    return _parse(read_text(path, f"{origin}={name}"), str(path))


def default_max_tokens(name: str) -> int:
    return DEFAULT_MAX_TOKENS.get(name, 256)


def _parse(text: str, origin: str) -> list[Prompt]:
    prompts = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        where = f"{origin}:{number}"
        try:
            obj: Any = json.loads(line)
        except ValueError as exc:
            raise ConfigError(f"{where}: invalid JSON: {exc}") from None
        if not isinstance(obj, dict):
            raise ConfigError(f"{where}: expected an object with 'prompt' or 'messages'")
        unknown = set(obj) - {"prompt", "messages", "max_tokens"}
        if unknown:
            raise ConfigError(f"{where}: unknown key '{sorted(unknown)[0]}'; valid: prompt, "
                              "messages, max_tokens")
        max_tokens = obj.get("max_tokens")
        if max_tokens is not None and (not isinstance(max_tokens, int) or max_tokens < 1):
            raise ConfigError(f"{where}: key 'max_tokens' must be a positive integer")
        if isinstance(obj.get("prompt"), str) and obj["prompt"]:
            prompts.append(Prompt(text=obj["prompt"], max_tokens=max_tokens))
        elif isinstance(obj.get("messages"), list) and obj["messages"]:
            msgs = obj["messages"]
            if not all(isinstance(m, dict) and "role" in m and "content" in m for m in msgs):
                raise ConfigError(f"{where}: key 'messages' must be a list of "
                                  "{\"role\", \"content\"} objects")
            prompts.append(Prompt(messages=tuple(msgs), max_tokens=max_tokens))
        else:
            raise ConfigError(f"{where}: needs a non-empty 'prompt' string or 'messages' list")
    if not prompts:
        raise ConfigError(f"{origin}: no prompts in the file")
    return prompts
