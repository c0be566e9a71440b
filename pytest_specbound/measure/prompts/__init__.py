"""Built-in prompt classes (package data) and the loader for user JSONL prompt sets."""

from __future__ import annotations

from importlib import resources
from pathlib import Path

from pytest_specbound.errors import ConfigError
from pytest_specbound.measure.hub_sets import is_hub, load_hub
from pytest_specbound.measure.prompt_sets import PromptSet
from pytest_specbound.serving.backends.base import Prompt

BUILTIN = ("coding", "chat", "repetitive", "long")
DEFAULT_MAX_TOKENS = {"coding": 256, "chat": 256, "repetitive": 256, "long": 128}


def load_prompts(name: str, origin: str = "prompts") -> list[Prompt]:
    """A built-in class name, a path to a prompt set (:mod:`~pytest_specbound.measure.prompt_sets`:
    plain JSONL, MT-bench, ShareGPT), or a hub dataset (``hf:NAME[:CONFIG][@SPLIT]``)."""
    return list(load_set(name, origin).prompts)


def load_set(name: str, origin: str = "prompts", turns: str | int | None = None,
             output_len: int | None = None) -> PromptSet:
    """:func:`load_prompts` with what reading decided (conversations skipped, turns used);
    ``turns`` and ``output_len`` are the class's settings
    (:func:`~pytest_specbound.measure.prompt_sets.read_set`)."""
    from pytest_specbound.measure.json_stream import read_entries
    from pytest_specbound.measure.prompt_sets import read_set

    if name in BUILTIN:
        resource = resources.files(__package__).joinpath(f"{name}.jsonl")
        with resources.as_file(resource) as path:
            return read_set(read_entries(path, f"pytest_specbound/prompts/{name}.jsonl"),
                            f"pytest_specbound/prompts/{name}.jsonl", turns, False, output_len)
    if is_hub(name):
        return load_hub(name, origin, turns, output_len)
    path = Path(name)
    if path.suffix not in (".jsonl", ".json") and not path.exists():
        raise ConfigError(
            f"{origin}={name!r}: unknown prompt set; valid: {', '.join(BUILTIN)}, a .jsonl file "
            "or hf:DATASET[:CONFIG][@SPLIT]"
        )
    return read_set(read_entries(path, f"{origin}={name}" if not path.exists() else str(path)),
                    str(path), turns, False, output_len)


def default_max_tokens(name: str) -> int:
    return DEFAULT_MAX_TOKENS.get(name, 256)
