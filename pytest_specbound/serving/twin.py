"""A server's no-speculation twin: its launch command with the speculation flags removed, per
server family. Where the flags cannot be removed safely (a TensorRT-LLM YAML, a wrapper script,
a preset that names its own draft model) the caller is told to give the twin's launch itself.
"""

from __future__ import annotations

import shlex
from collections.abc import Sequence
from dataclasses import dataclass

from pytest_specbound.errors import ConfigError
from pytest_specbound.serving.settings import argv_of, runs


@dataclass(frozen=True)
class SpeculationFlags:
    """How one server family's command line turns speculation on."""

    programs: tuple[str, ...]  # what runs the server (program file name or -m module)
    prefixes: tuple[str, ...] = ()  # every flag starting so takes one value (bar ``switches``)
    valued: tuple[str, ...] = ()  # flags taking one value
    switches: tuple[str, ...] = ()  # flags taking none
    pairs: tuple[str, ...] = ()  # flags taking two values
    refuse: tuple[str, ...] = ()  # flags that bring speculation we cannot take out


FAMILIES: dict[str, SpeculationFlags] = {
    "llamacpp": SpeculationFlags(
        programs=("llama-server",),
        prefixes=("--spec-", "--draft"),
        valued=("-md", "--model-draft", "-ngld", "--gpu-layers-draft", "--n-gpu-layers-draft",
                "-devd", "--device-draft", "-ctkd", "-ctvd", "--cache-type-k-draft",
                "--cache-type-v-draft", "-td", "-tbd", "--threads-draft", "--threads-batch-draft",
                "-Cd", "-Crd", "-Cbd", "--cpu-mask-draft", "--cpu-range-draft",
                "--cpu-mask-batch-draft", "--cpu-strict-draft", "--cpu-strict-batch-draft",
                "--prio-draft", "--prio-batch-draft", "--poll-draft", "--poll-batch-draft",
                "-otd", "--override-tensor-draft", "-ncmoed", "--n-cpu-moe-draft", "-cd",
                "--ctx-size-draft", "-hfd", "-hfrd", "--hf-repo-draft"),
        switches=("--spec-draft-cpu-moe", "-cmoed", "--cpu-moe-draft", "--spec-default",
                  "--spec-draft-backend-sampling", "--no-spec-draft-backend-sampling"),
        pairs=("--spec-replace",),
        refuse=("--fim-qwen-7b-spec", "--fim-qwen-14b-spec")),
    "vllm": SpeculationFlags(
        programs=("vllm", "vllm.entrypoints"),
        prefixes=("--speculative-", "--speculative_"),
        # --per-request-spec-decode-metrics: vLLM refuses to start with it and no speculation
        valued=("-sc", "--num-speculative-tokens", "--ngram-prompt-lookup-max",
                "--ngram-prompt-lookup-min", "--spec-decoding-acceptance-method",
                "--per-request-spec-decode-metrics", "--per_request_spec_decode_metrics")),
    "sglang": SpeculationFlags(programs=("sglang",), prefixes=("--speculative-",)),
    "tgi": SpeculationFlags(programs=("text-generation-launcher",), valued=("--speculate",)),
}
PROGRAM_PLACEHOLDERS = {"{llama_server}": "llama-server"}  # a placeholder naming the server
CANNOT = {"trtllm": "TensorRT-LLM reads its speculation from the YAML it is given",
          "openai": "a generic OpenAI server's speculation flags are not known"}


def family_of(argv: Sequence[str], backend: str) -> str | None:
    """The server family a launch command runs: the budget's backend, else its program."""
    if backend != "auto":
        return backend
    if runs(argv, "trtllm-serve"):
        return "trtllm"
    return next((name for name, f in FAMILIES.items() if runs(argv, *f.programs)), None)


def launch_family(launch: str, backend: str) -> str | None:
    """The server family a launch command runs (a placeholder read as the program it names)."""
    return family_of([PROGRAM_PLACEHOLDERS.get(word, word) for word in argv_of(launch)], backend)


def without_speculation(launch: str, backend: str, origin: str) -> str:
    """``launch`` with its speculation flags removed; a :class:`ConfigError` naming ``origin``
    and asking for ``[no_speculation] launch`` where that cannot be done safely."""
    argv = argv_of(launch)
    program = [PROGRAM_PLACEHOLDERS.get(word, word) for word in argv]
    ask = "give the server without speculation as [no_speculation] launch (or url)"
    family = family_of(program, backend)
    if family in CANNOT:
        raise ConfigError(f"{origin}: cannot derive a server without speculation: "
                          f"{CANNOT[family]}; {ask}")
    flags = FAMILIES.get(family or "")
    if flags is None or not runs(program, *flags.programs):
        raise ConfigError(f"{origin}: cannot derive a server without speculation: the launch "
                          f"command does not run {' or '.join(flags.programs) if flags else 'a known server'} "
                          f"itself (a wrapper's flags are not known); {ask}")
    kept, removed = _strip(argv, flags)
    refused = [a for a in removed if a in flags.refuse]
    if refused:
        raise ConfigError(f"{origin}: cannot derive a server without speculation: {refused[0]} "
                          f"is a preset with its own draft model; {ask}")
    if not removed:
        raise ConfigError(f"{origin}: cannot derive a server without speculation: the launch "
                          f"command has no {family} speculation flag (it may come from a config "
                          f"file or the environment); {ask}")
    return " ".join(shell_word(word) for word in kept)


def _strip(argv: Sequence[str], flags: SpeculationFlags) -> tuple[list[str], list[str]]:
    """(the words kept, the speculation flags found)."""
    kept: list[str] = []
    removed: list[str] = []
    i = 0
    while i < len(argv):
        word = argv[i]
        name, eq, _ = word.partition("=")
        takes = _values(name, flags, argv[i + 1] if i + 1 < len(argv) else None)
        if takes is None:
            kept.append(word)
            i += 1
            continue
        removed.append(name)
        i += 1 + (0 if eq else takes)
    return kept, removed


def _values(name: str, flags: SpeculationFlags, following: str | None) -> int | None:
    """How many values the speculation flag ``name`` takes; None: not a speculation flag."""
    if name in flags.refuse or name in flags.switches:
        return 0
    if name in flags.pairs:
        return 2
    if name in flags.valued:
        return 1
    if name.startswith(flags.prefixes):  # an unknown flag of the family: a value unless none
        return 1 if following is not None and not _is_flag(following) else 0
    return None


def shell_word(word: str) -> str:
    """A word as a shell would need it, leaving ``{placeholder}`` braces unquoted."""
    bare = word.replace("{", "").replace("}", "")
    return word if bare and shlex.quote(bare) == bare else shlex.quote(word)


def _is_flag(word: str) -> bool:
    return word.startswith("-") and not word.lstrip("-").replace(".", "", 1).isdigit()
