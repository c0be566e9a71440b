"""Prompt sets from a Hugging Face dataset: ``prompts = "hf:NAME[:CONFIG][@SPLIT]"`` (the
``datasets`` extra), e.g. ``hf:nvidia/SPEED-Bench:qualitative@test`` or
``hf:HuggingFaceH4/mt_bench_prompts@train``. Rows are read as a prompt file's entries
(:mod:`~pytest_specbound.measure.prompt_sets`), their other columns ignored. Loaded once per
process; ``datasets`` caches the download, so a runner that reached the hub once reads it
offline after (``HF_DATASETS_OFFLINE=1``)."""

from __future__ import annotations

import functools
import re

from pytest_specbound.errors import ConfigError
from pytest_specbound.measure.prompt_sets import PromptSet

PREFIX = "hf:"
SPEC = re.compile(r"^hf:(?P<name>[^:@\s]+)(?::(?P<config>[^:@\s]+))?(?:@(?P<split>[^:@\s]+))?$")
EXTRA = "pip install 'pytest-specbound[datasets]'"


def is_hub(name: str) -> bool:
    return name.startswith(PREFIX)


@functools.lru_cache(maxsize=32)
def load_hub(spec: str, origin: str, turns: str | int | None = None,
             output_len: int | None = None) -> PromptSet:
    """The dataset's rows as prompts; every failure (no extra, no such dataset, no network, a
    split that is not there) is one line naming the setting."""
    from pytest_specbound.measure.prompt_sets import read_set

    where = f"{origin}={spec!r}"
    match = SPEC.match(spec)
    if not match:
        raise ConfigError(f"{where}: expected hf:NAME[:CONFIG][@SPLIT], e.g. "
                          "hf:nvidia/SPEED-Bench:qualitative@test")
    try:
        import datasets  # type: ignore[import-untyped]  # the optional extra
    except ImportError:
        raise ConfigError(f"{where}: a hub dataset needs the datasets extra: {EXTRA}") from None
    name, config, split = match["name"], match["config"], match["split"]
    try:
        loaded = datasets.load_dataset(name, config, split=split)
    except Exception as exc:  # the loader's many failures (hub, network, split): setup errors
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        raise ConfigError(f"{where}: could not load {name}"
                          f"{f' ({config})' if config else ''}: {first}") from None
    if isinstance(loaded, datasets.DatasetDict):
        splits = sorted(loaded)
        if len(splits) != 1:
            raise ConfigError(f"{where}: the dataset has splits {', '.join(splits)}: "
                              f"name one, e.g. {spec}@{splits[0]}")
        loaded = loaded[splits[0]]
    if not len(loaded):
        raise ConfigError(f"{where}: the dataset has no rows")
    return read_set(((f"{spec}[{i}]", dict(row)) for i, row in enumerate(loaded)), where,
                    turns, other_keys=True, output_len=output_len)
