"""Pinned acceptance: a launch command (or its environment) given the engine's synthetic
acceptance setting, so the system is measured at a chosen accept length without the drafter's
noise. Per family (each engine's own benchmarking setting):

- llama-server: ``--spec-synth-rates`` with the minimum-variance per-position schedule (every
  round accepts floor(L-1) drafts, one more with the fractional part's probability), not
  ``--spec-synth-len`` (a geometric schedule whose accept varies round to round);
- vLLM: ``--speculative-config``'s ``rejection_sample_method: "synthetic"`` with
  ``synthetic_acceptance_length`` (vLLM resolves it to the same minimum-variance schedule);
- SGLang: ``SGLANG_SIMULATE_ACC_LEN`` (and ``SGLANG_SIMULATE_ACC_METHOD=match-expected``);
- TensorRT-LLM: ``TLLM_SPEC_DECODE_FORCE_NUM_ACCEPTED_TOKENS`` = L - 1 (it counts accepted
  draft tokens, not the bonus token; fractional in recent versions).

The synthetic modes accept drafts the drafter proposed: a drafter that proposes nothing (an
n-gram lookup without a match) still verifies one token, so the accept measured is checked
against the pin, not assumed."""

from __future__ import annotations

import json
import math
from dataclasses import replace

from pytest_specbound.errors import ConfigError
from pytest_specbound.serving.connect import ServerConfig
from pytest_specbound.serving.settings import argv_of
from pytest_specbound.serving.twin import PROGRAM_PLACEHOLDERS, family_of, shell_word

PINNABLE = ("llamacpp", "vllm", "sglang", "trtllm")
LLAMA_SYNTH = ("--spec-synth-len", "--spec-synth-rates")
VLLM_CONFIG = ("--speculative-config", "-sc")


def min_variance_rates(accept: float, steps: int) -> list[float]:
    """Per-position unconditional acceptance rates with mean accept ``accept`` (bonus token
    included) over ``steps`` drafts: [1]*full + [fraction] + [0]*rest."""
    drafts = accept - 1
    full = min(math.floor(drafts + 1e-9), steps)
    rates = [1.0] * full + ([round(drafts - full, 6)] if full < steps else [])
    return (rates + [0.0] * steps)[:steps]


def pinned(cfg: ServerConfig, accept: float, steps: int, origin: str) -> ServerConfig:
    """``cfg`` launched at the pinned accept length; unchanged for a server attached by url
    (it is pinned or not by its own launch: the measured accept says which)."""
    if not cfg.launch:
        return cfg
    if not 1.0 <= accept <= steps + 1:
        raise ConfigError(f"{origin}: {accept:g} is outside [1, {steps + 1}] (the accept length "
                          f"of {steps} draft steps, the bonus token included)")
    argv = argv_of(cfg.launch)
    program = [PROGRAM_PLACEHOLDERS.get(word, word) for word in argv]
    family = family_of(program, cfg.backend)
    if family == "llamacpp":
        rates = ",".join(f"{r:g}" for r in min_variance_rates(accept, steps))
        kept = _without(argv, LLAMA_SYNTH)
        return replace(cfg, launch=_join([*kept, "--spec-synth-rates", rates]))
    if family == "vllm":
        return replace(cfg, launch=_join(_vllm(argv, accept, origin)))
    if family == "sglang":
        env = dict(cfg.env)
        env["SGLANG_SIMULATE_ACC_LEN"] = f"{accept:g}"
        env.setdefault("SGLANG_SIMULATE_ACC_METHOD", "match-expected")
        return replace(cfg, env=tuple(env.items()))
    if family == "trtllm":
        env = dict(cfg.env)
        env["TLLM_SPEC_DECODE_FORCE_NUM_ACCEPTED_TOKENS"] = f"{accept - 1:g}"
        return replace(cfg, env=tuple(env.items()))
    known = family or "this server"
    raise ConfigError(f"{origin}: {known} has no synthetic-acceptance setting to pin the "
                      f"accept length with (pinning knows {', '.join(PINNABLE)})")


def _vllm(argv: list[str], accept: float, origin: str) -> list[str]:
    """``--speculative-config``'s JSON with the synthetic rejection sampler at ``accept``."""
    out = list(argv)
    for i, word in enumerate(argv):
        name, eq, value = word.partition("=")
        if name not in VLLM_CONFIG:
            continue
        if not eq:
            if i + 1 >= len(argv):
                break
            value = argv[i + 1]
        try:
            config = json.loads(value)
        except ValueError:
            config = None
        if not isinstance(config, dict):
            raise ConfigError(f"{origin}: {name} is not a JSON object ({value!r}): pinning "
                              "sets its rejection_sample_method")
        config.pop("synthetic_acceptance_rates", None)
        config.update(rejection_sample_method="synthetic", synthetic_acceptance_length=accept)
        text = json.dumps(config, separators=(",", ":"))
        if eq:
            out[i] = f"{name}={text}"
        else:
            out[i + 1] = text
        return out
    raise ConfigError(f"{origin}: the vLLM launch command has no --speculative-config to pin "
                      "(pinning sets its synthetic rejection sampler)")


def _without(argv: list[str], flags: tuple[str, ...]) -> list[str]:
    kept: list[str] = []
    skip = False
    for word in argv:
        if skip:
            skip = False
            continue
        name, eq, _ = word.partition("=")
        if name in flags:
            skip = not eq
            continue
        kept.append(word)
    return kept


def _join(argv: list[str]) -> str:
    return " ".join(shell_word(word) for word in argv)
