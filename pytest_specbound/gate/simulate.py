"""Synthetic measurements for checking stopping rules (used by tests and bench/verdict_cost.py)."""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Sequence

from pytest_specbound.gate.budget import ClassBudget
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


def run_sequential(rng: random.Random, budget: ClassBudget, roof: Roofline, tok_s: float,
                   accept: float, rate_sd: float, confidence: float = 0.95,
                   min_samples: int = 4, max_samples: int = 64, tokens: int = 256,
                   noise: Sequence[float] | None = None,
                   resolution: float = DEFAULT_RESOLUTION,
                   log_noise: Callable[[random.Random], float] | None = None) -> tuple[str, int]:
    """Sample until the sequential rule stops; return (verdict status, requests used).

    ``noise``, when given, is a pool of observed per-request rate ratios (rate / mean rate) to
    draw from instead of the lognormal model; ``log_noise`` draws each request's log rate
    deviation instead (then ``tok_s`` is the rates' geometric mean, the tests' parameter).
    """
    from pytest_specbound.gate.judge import judge
    from pytest_specbound.gate.rule import SequentialRule
    from pytest_specbound.measure.measurement import Measurement

    rule = SequentialRule(budget, roof, confidence, min_samples, max_samples, resolution)
    records: list[RequestRecord] = []
    while rule.stop_reason(Measurement("sim", tuple(records))) is None:
        if log_noise:
            rec = synthetic_record(rng, tok_s * math.exp(log_noise(rng)), accept, tokens, 0.0)
        elif noise:
            rec = synthetic_record(rng, tok_s * rng.choice(noise), accept, tokens, 0.0)
        else:
            rec = synthetic_record(rng, tok_s, accept, tokens, rate_sd)
        records.append(rec)
    look = rule.look(Measurement(backend="sim", records=records))
    return judge(budget, look.measurement, roof, look.decisions).status, len(records)


def run_fixed(rng: random.Random, budget: ClassBudget, roof: Roofline, tok_s: float,
              accept: float, rate_sd: float, n: int, tokens: int = 256,
              noise: Sequence[float] | None = None) -> str:
    """Fixed-N run judged on the point estimate (how fixed-count benchmarks are read)."""
    from pytest_specbound.gate.judge import judge
    from pytest_specbound.measure.measurement import Measurement

    records = [synthetic_record(rng, tok_s * (rng.choice(noise) if noise else 1.0), accept,
                                tokens, 0.0 if noise else rate_sd) for _ in range(n)]
    return judge(budget, Measurement(backend="sim", records=records), roof).status
