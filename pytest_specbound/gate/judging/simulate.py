"""Synthetic measurements for checking stopping rules (used by tests and bench/verdict_cost.py)."""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from pytest_specbound.gate.schema.class_budget import ClassBudget
from pytest_specbound.physics.roofline import Roofline
from pytest_specbound.serving.records import RequestRecord
from pytest_specbound.values import DEFAULT_RESOLUTION


def synthetic_record(rng: random.Random, tok_s: float, accept: float, tokens: int,
                     rate_sd: float, accept_sd: float = 0.0) -> RequestRecord:
    """One request whose decode rate and accept length carry multiplicative noise."""
    rate = tok_s * math.exp(rng.gauss(0.0, rate_sd) - rate_sd**2 / 2)
    a = max(1.0, accept * math.exp(rng.gauss(0.0, accept_sd) - accept_sd**2 / 2))
    return RequestRecord(completion_tokens=tokens + 1, decode_s=tokens / rate, accept_length=a,
                         accept_source="server")


@dataclass(frozen=True)
class SimulatedServer:
    """What the simulated server does: its decode rate, accept length and per-request noise.

    ``noise``, when given, is a pool of observed per-request rate ratios (rate / mean rate) to
    draw from instead of the lognormal model of ``rate_sd``; ``log_noise`` draws each request's
    log rate deviation instead (then ``tok_s`` is the rates' geometric mean).
    """

    tok_s: float
    accept: float
    rate_sd: float
    tokens: int = 256  # decode tokens per request
    noise: Sequence[float] | None = None
    log_noise: Callable[[random.Random], float] | None = None


@dataclass(frozen=True)
class Looks:
    """How the sequential rule looks: its confidence, sample bounds and resolution."""

    confidence: float = 0.95
    min_samples: int = 4
    max_samples: int = 64
    resolution: float = DEFAULT_RESOLUTION


DEFAULT_LOOKS = Looks()


def run_sequential(rng: random.Random, budget: ClassBudget, roof: Roofline,
                   server: SimulatedServer, looks: Looks = DEFAULT_LOOKS) -> tuple[str, int]:
    """Sample ``server`` until the sequential rule stops; return (verdict status, requests used)."""
    from pytest_specbound.gate.judging.judge import judge
    from pytest_specbound.gate.judging.rule import SequentialRule
    from pytest_specbound.measure.measurement import Measurement

    rule = SequentialRule(budget, roof, looks.confidence, looks.min_samples, looks.max_samples,
                          looks.resolution)
    tok_s, accept, tokens = server.tok_s, server.accept, server.tokens
    records: list[RequestRecord] = []
    while rule.stop_reason(Measurement("sim", tuple(records))) is None:
        if server.log_noise:
            rec = synthetic_record(rng, tok_s * math.exp(server.log_noise(rng)), accept, tokens,
                                   0.0)
        elif server.noise:
            rec = synthetic_record(rng, tok_s * rng.choice(server.noise), accept, tokens, 0.0)
        else:
            rec = synthetic_record(rng, tok_s, accept, tokens, server.rate_sd)
        records.append(rec)
    look = rule.look(Measurement(backend="sim", records=records))
    return judge(budget, look.measurement, roof, look.decisions).status, len(records)


def run_fixed(rng: random.Random, budget: ClassBudget, roof: Roofline, server: SimulatedServer,
              n: int) -> str:
    """Fixed-N run judged on the point estimate (how fixed-count benchmarks are read)."""
    from pytest_specbound.gate.judging.judge import judge
    from pytest_specbound.measure.measurement import Measurement

    noise = server.noise
    records = [synthetic_record(rng, server.tok_s * (rng.choice(noise) if noise else 1.0),
                                server.accept, server.tokens, 0.0 if noise else server.rate_sd)
               for _ in range(n)]
    return judge(budget, Measurement(backend="sim", records=records), roof).status
