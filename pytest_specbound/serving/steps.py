"""A launch command at another draft step count K, per server family: llama-server's
``--spec-draft-n-max``, vLLM's ``num_speculative_tokens`` (in ``--speculative-config`` or its
own flag), SGLang's ``--speculative-num-steps`` and chain width. A ``{steps}`` placeholder in
the command is filled instead, for any server (a wrapper, a TensorRT-LLM YAML made per K)."""

from __future__ import annotations

import json

from pytest_specbound.errors import ConfigError
from pytest_specbound.serving.settings import argv_of, flag_value
from pytest_specbound.serving.twin import launch_family, shell_word

PLACEHOLDER = "{steps}"


def with_steps(launch: str, backend: str, steps: int, origin: str) -> str:
    """``launch`` drafting ``steps`` tokens a round; a :class:`ConfigError` naming ``origin``
    where the family's flag is not there to set (write ``{steps}`` where K goes)."""
    if PLACEHOLDER in launch:
        return launch.replace(PLACEHOLDER, str(steps))
    argv = argv_of(launch)
    family = launch_family(launch, backend)
    setter = {"llamacpp": _llamacpp, "vllm": _vllm, "sglang": _sglang}.get(family or "")
    found = setter(argv, steps) if setter else None
    if found is None:
        raise ConfigError(f"{origin}: cannot set the draft step count in the launch command "
                          f"({_what(family)}): write {PLACEHOLDER} where it goes")
    return " ".join(shell_word(word) for word in found)


def _what(family: str | None) -> str:
    return {"llamacpp": "no --spec-draft-n-max or --spec-type draft/ngram flag",
            "vllm": "no --speculative-config with num_speculative_tokens",
            "sglang": "no --speculative-num-steps, or a tree (--speculative-eagle-topk above 1)",
            }.get(family or "", f"{family or 'an unknown server'}'s flags are not known")


def _set(argv: list[str], flag: str, value: str) -> list[str]:
    """``argv`` with ``flag``'s value replaced (``--flag v`` or ``--flag=v``), or appended."""
    out = list(argv)
    for i, word in enumerate(out):
        if word == flag and i + 1 < len(out):
            out[i + 1] = value
            return out
        if word.startswith(flag + "="):
            out[i] = f"{flag}={value}"
            return out
    return [*out, flag, value]


def _value(argv: list[str], flag: str) -> str | None:
    found = flag_value(argv, flag)
    return found[0] if found else None


def _llamacpp(argv: list[str], steps: int) -> list[str] | None:
    if not any(w.startswith(("-md", "--model-draft", "--spec-type", "--spec-")) for w in argv):
        return None
    out = _set(argv, "--spec-draft-n-max", str(steps))
    low = _value(out, "--spec-draft-n-min")
    if low is not None and low.isdigit() and int(low) > steps:
        out = _set(out, "--spec-draft-n-min", str(steps))
    rates = _value(out, "--spec-synth-rates")  # llama.cpp wants exactly one rate a position
    if rates is not None:
        given = rates.split(",")
        if len(given) < steps:
            raise ConfigError(f"--spec-synth-rates gives {len(given)} positions' acceptance; "
                              f"K={steps} needs {steps}: give one rate per position up to the "
                              "largest K")
        out = _set(out, "--spec-synth-rates", ",".join(given[:steps]))
    return out


def _vllm(argv: list[str], steps: int) -> list[str] | None:
    for flag in ("--speculative-config", "--speculative_config", "-sc"):
        text = _value(argv, flag)
        if text is None:
            continue
        try:
            config = json.loads(text)
        except ValueError:
            return None
        if not isinstance(config, dict):
            return None
        config["num_speculative_tokens"] = steps
        return _set(argv, flag, json.dumps(config, separators=(",", ":")))
    if _value(argv, "--num-speculative-tokens") is not None:
        return _set(argv, "--num-speculative-tokens", str(steps))
    return None


def _sglang(argv: list[str], steps: int) -> list[str] | None:
    topk = _value(argv, "--speculative-eagle-topk")
    if _value(argv, "--speculative-num-steps") is None or (topk and topk != "1"):
        return None
    out = _set(argv, "--speculative-num-steps", str(steps))
    return _set(out, "--speculative-num-draft-tokens", str(steps + 1))
