"""What a server runs: speculation, draft steps, its layout (TP, PP, EP, DP attention), dtype,
slots, threads, eager mode.

Read from the server where it reports them (llama-server ``/props`` and ``/slots``, SGLang and
vLLM server info) and from its launch command where the server does not; every value keeps where
it was read (``/props total_slots``, ``launch: -np 4``), so a mismatch can name its source.
"""

from __future__ import annotations

import json
import os
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields

FIELDS = ("speculative", "method", "draft_steps", "draft_tokens", "tp_size", "dtype", "slots",
          "threads", "eager", "pp_size", "ep_size", "dp_size", "dp_attention", "group_tp")


@dataclass(frozen=True)
class Served:
    """The server's settings; None where neither the server nor its launch command says."""

    speculative: bool | None = None  # whether it drafts at all
    method: str | None = None  # a budget method name: mtp, eagle, eagle3, draft, ngram, dflash
    draft_steps: int | None = None
    draft_tokens: int | None = None
    tp_size: int | None = None
    dtype: str | None = None
    slots: int | None = None  # sequences it serves at once (llama -np, vLLM --max-num-seqs)
    threads: int | None = None  # CPU servers: compute threads
    eager: bool | None = None  # CUDA graphs off
    pp_size: int | None = None  # pipeline stages
    ep_size: int | None = None  # GPUs the routed experts spread over (1: split by TP)
    dp_size: int | None = None  # data-parallel attention ranks (or replicas)
    dp_attention: bool | None = None  # attention data-parallel across the MoE group
    # the GPUs of one pipeline stage as a layout's tp counts them (vLLM's TP x DP under expert
    # parallelism; SGLang's and TensorRT-LLM's TP)
    group_tp: int | None = None

    @property
    def instance_gpus(self) -> int | None:
        """GPUs one instance runs on: the stage's group times its stages."""
        group = self.group_tp if self.group_tp is not None else self.tp_size
        return None if group is None else group * (self.pp_size or 1)
    sources: Mapping[str, str] = field(default_factory=dict)  # field -> where it was read

    def over(self, other: Served) -> Served:
        """These values, and ``other``'s where these are unknown (the server over its launch)."""
        values = {f: getattr(self, f) if getattr(self, f) is not None else getattr(other, f)
                  for f in FIELDS}
        sources = {f: (self.sources if getattr(self, f) is not None else other.sources).get(f, "")
                   for f in FIELDS if values[f] is not None}
        return Served(**values, sources=sources)

    def to_json(self) -> dict[str, object]:
        data: dict[str, object] = {f: getattr(self, f) for f in FIELDS
                                   if getattr(self, f) is not None}
        if data:
            data["sources"] = dict(self.sources)
        return data

    @classmethod
    def of(cls, values: Mapping[str, tuple[object, str]]) -> Served:
        """From ``field -> (value, source)``; unknown fields are ignored."""
        names = {f.name for f in fields(cls)} - {"sources"}
        kept = {k: v for k, v in values.items() if k in names and v[0] is not None}
        return cls(**{k: v[0] for k, v in kept.items()},  # type: ignore[arg-type]
                   sources={k: v[1] for k, v in kept.items()})


def argv_of(launch: str | None) -> list[str]:
    try:
        return shlex.split(launch or "")
    except ValueError:
        return []


def runs(argv: Sequence[str], *names: str) -> bool:
    """Whether the command is the server itself (``llama-server``, ``vllm serve``, ``python -m
    sglang.launch_server``), not a wrapper: only then does a missing flag mean its default.
    The program is matched by its file name and a ``-m`` module by its dotted name, never as a
    substring of a path (a venv named ``novllm`` does not run vLLM)."""
    words = list(argv)
    while words and (words[0] == "env" or ("=" in words[0] and not words[0].startswith("-"))):
        words.pop(0)  # env A=1 vllm serve
    if not words:
        return False
    if os.path.basename(words[0]) in names:
        return True
    for i, word in enumerate(words[1:4], start=1):
        module = words[i + 1] if word == "-m" and i + 1 < len(words) else (
            word[2:] if word.startswith("-m") and len(word) > 2 else None)
        if module is not None:
            return any(module == n or module.startswith(n + ".") for n in names)
    return False


def flag_value(argv: Sequence[str], *flags: str) -> tuple[str, str] | None:
    """The last value given to any of ``flags`` (``-t 4`` or ``--threads=4``), and the flag as
    written; later flags win, as in the servers' own parsers."""
    found: tuple[str, str] | None = None
    for i, arg in enumerate(argv):
        name, eq, value = arg.partition("=")
        if name in flags:
            text = value if eq else (argv[i + 1] if i + 1 < len(argv) else "")
            found = (text, f"{name} {text}")
    return found


def has_flag(argv: Sequence[str], *flags: str) -> str | None:
    return next((a.partition("=")[0] for a in argv if a.partition("=")[0] in flags), None)


def int_flag(argv: Sequence[str], *flags: str) -> tuple[int | None, str]:
    found = flag_value(argv, *flags)
    if found is None or not found[0].isdigit():
        return None, ""
    return int(found[0]), f"launch: {found[1]}"


def json_flag(argv: Sequence[str], *flags: str) -> tuple[dict[str, object], str]:
    found = flag_value(argv, *flags)
    if found is None:
        return {}, ""
    try:
        value = json.loads(found[0])
    except ValueError:
        return {}, ""
    return (value, f"launch: {flags[0]}") if isinstance(value, dict) else ({}, "")
