"""Built-in prompt classes (package data) and the loader for user JSONL prompt sets."""

from __future__ import annotations

from importlib import resources
from pathlib import Path

from pytest_specbound._toml import read_text
from pytest_specbound.errors import ConfigError
from pytest_specbound.measure.hub_sets import is_hub, load_hub
from pytest_specbound.serving.backends.base import Prompt

BUILTIN = ("coding", "chat", "repetitive", "long")
DEFAULT_MAX_TOKENS = {"coding": 256, "chat": 256, "repetitive": 256, "long": 128}


def load_prompts(name: str, origin: str = "prompts") -> list[Prompt]:
    """A built-in class name, a path to a prompt set (:mod:`~pytest_specbound.measure.prompt_sets`:
    plain JSONL, MT-bench, ShareGPT), or a hub dataset (``hf:NAME[:CONFIG][@SPLIT]``)."""
    if name in BUILTIN:
        text = resources.files(__package__).joinpath(f"{name}.jsonl").read_text("utf-8")
        return _parse(text, f"pytest_specbound/prompts/{name}.jsonl")
    if is_hub(name):
        return list(load_hub(name, origin))
    path = Path(name)
    if path.suffix not in (".jsonl", ".json") and not path.exists():
        raise ConfigError(
            f"{origin}={name!r}: unknown prompt set; valid: {', '.join(BUILTIN)}, a .jsonl file "
            "or hf:DATASET[:CONFIG][@SPLIT]"
        )
    return _parse(read_text(path, f"{origin}={name}"), str(path))


def default_max_tokens(name: str) -> int:
    return DEFAULT_MAX_TOKENS.get(name, 256)


def _parse(text: str, origin: str) -> list[Prompt]:
    from pytest_specbound.measure.prompt_sets import entries, to_prompt

    prompts = [to_prompt(obj, where) for where, obj in entries(text, origin)]
    if not prompts:
        raise ConfigError(f"{origin}: no prompts in the file")
    return prompts
