"""Speculation against none: the speedup of one class at one level over the same class measured
on the server without speculation, its sequential test, and the engine's cost per draft step.

The speedup is the ratio of the two geometric means of per-request decode rates (per user):
``exp(mean(log r_spec) - mean(log r_base))``, with Welch's t interval on the difference of the
two independent log means (Welch-Satterthwaite degrees of freedom). The base is measured first
and fixed; a speedup floor ``s`` is then a floor on each speculative request's rate at ``s x``
the base, tested by the same sequential test as every threshold
(:mod:`pytest_specbound.measure.sequential`), at half the threshold's false-failure rate, against
the base's one-sided confidence bound (also at half): it fails only when the speculative rate is
below ``s x`` the base's *lower* bound, and passes only when above ``s x``
its *upper* bound. A union bound gives the stated rates: a false failure needs the base bound or
the test to err, each at most half of ``alpha``; likewise a false pass (a truth a resolution
under the limit) needs the base's upper bound (at ``1 - beta / 2``) or the test (at ``beta / 2``)
to err, so the miss rate stays at ``beta``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from pytest_specbound.measure.measurement import Measurement
from pytest_specbound.measure.sequential import (
    MIN_DECISION,
    MISS_RATE,
    Decision,
    Side,
    decide,
    passes,
)
from pytest_specbound.measure.stats import Interval, t_quantile


@dataclass(frozen=True)
class Sample:
    """A reference sample the two-sample tests compare with, fixed before this run's requests:
    per-request values (decode rates, or accept lengths) and, for the class measured without
    speculation, its round times, its roofline's round and the server's command."""

    rates: tuple[float, ...]  # per-request values: decode tok/s per user, or accept lengths
    rounds_ms: tuple[float, ...] = ()  # per-request time per round (one token per round)
    floor_round_ms: float = 0.0  # the roofline's round at the level, no speculation
    roofline_tok_s: float = 0.0
    command: str | None = None

    @property
    def n(self) -> int:
        return len(self.rates)

    @property
    def decode_tok_s(self) -> float:
        return math.exp(_mean_sd(_logs(self.rates))[0]) if self.rates else 0.0

    def bound(self, level: float, upper: bool) -> float:
        """One-sided confidence bound of the base's geometric-mean rate at ``level``."""
        mean, sd = _mean_sd(_logs(self.rates))
        if self.n < 2:
            return math.inf if upper else 0.0
        q = t_quantile(level, self.n - 1) * sd / math.sqrt(self.n)
        return math.exp(mean + q if upper else mean - q)

    def to_json(self) -> dict[str, object]:
        return {"n": self.n, "decode_tok_s": round(self.decode_tok_s, 3),
                "round_ms": round(_mean_sd(list(self.rounds_ms))[0], 4) if self.rounds_ms else None,
                "floor_round_ms": round(self.floor_round_ms, 4),
                "roofline_tok_s": round(self.roofline_tok_s, 3), "command": self.command}


def _logs(values: Sequence[float]) -> list[float]:
    return [math.log(v) for v in values if v > 0]


def _mean_sd(ys: Sequence[float]) -> tuple[float, float]:
    n = len(ys)
    if n == 0:
        return 0.0, 0.0
    mean = sum(ys) / n
    return mean, math.sqrt(sum((y - mean) ** 2 for y in ys) / (n - 1)) if n > 1 else 0.0


def welch(a: Sequence[float], b: Sequence[float], level: float) -> Interval | None:
    """Welch's two-sided interval at ``level`` for mean(a) - mean(b)."""
    if len(a) < 2 or len(b) < 2:
        return None
    (ma, sa), (mb, sb) = _mean_sd(a), _mean_sd(b)
    va, vb = sa * sa / len(a), sb * sb / len(b)
    diff = ma - mb
    if va + vb <= 0:
        return Interval(diff, diff, diff)
    df = (va + vb) ** 2 / (va**2 / (len(a) - 1) + vb**2 / (len(b) - 1))
    q = t_quantile(1 - (1 - level) / 2, max(1, int(df))) * math.sqrt(va + vb)
    return Interval(diff, diff - q, diff + q)


def spec_rates(m: Measurement) -> list[float]:
    return [r.decode_tokens / r.decode_s for r in m.timed]


def speedup(rates: Sequence[float], base: Sample, level: float) -> Interval | None:
    """Speculative over base per-user decode rate: ratio of geometric means, Welch interval."""
    diff = welch(_logs(rates), _logs(base.rates), level)
    if diff is None:
        return None
    return Interval(math.exp(diff.estimate), math.exp(diff.low), math.exp(diff.high))


def speedup_decision(rates: Sequence[float], base: Sample, limit: float, alpha: float,
                     resolution: float, min_n: int = MIN_DECISION) -> Decision:
    """The speedup floor ``limit``'s sequential test (see the module's docstring)."""
    logs = _logs(rates)
    shown = speedup(rates, base, 1 - 2 * alpha)
    est = shown.estimate if shown else None
    low, high = (shown.low, shown.high) if shown else (None, None)
    if limit <= 0:
        return Decision(Side.OK, len(logs), est, low, high)
    half, half_beta = alpha / 2, MISS_RATE / 2
    lo_base, hi_base = base.bound(1 - half, upper=False), base.bound(1 - half_beta, upper=True)
    against_low = decide([y - math.log(limit * lo_base) for y in logs], half, resolution,
                         min_n=min_n) if lo_base > 0 else None
    above_high = [y - math.log(limit * hi_base) for y in logs] if math.isfinite(hi_base) else []
    against_high = decide(above_high, half, resolution, half_beta, min_n) if above_high else None
    if against_low is not None and against_low.side is Side.BAD:
        return Decision(Side.BAD, len(logs), est, low, high)
    if above_high and passes(above_high, resolution, half_beta, min_n):
        return Decision(Side.OK, len(logs), est, low, high)
    mores = [d.more for d in (against_low, against_high) if d is not None and d.more is not None]
    return Decision(Side.UNSURE, len(logs), est, low, high, min(mores) if mores else None)


@dataclass(frozen=True)
class DraftCost:
    """The engine's own cost per draft forward: the round time above the roofline with
    speculation, less the same without, per draft forward, with its interval."""

    ms: float
    low: float
    high: float
    forwards: int
    level: float

    def to_json(self) -> dict[str, object]:
        return {"ms": round(self.ms, 4), "low": round(self.low, 4), "high": round(self.high, 4),
                "forwards": self.forwards, "confidence": self.level, "measured": True}


def spec_rounds_ms(m: Measurement) -> list[float]:
    """Each timed request's time per verify round (its own steps, else the window's accept)."""
    fixed = m.window_accept or 1.0
    return [r.decode_s * 1e3 / (r.verify_steps or r.decode_tokens / fixed) for r in m.timed
            if (r.verify_steps or r.decode_tokens)]


def draft_step_cost(rounds_ms: Sequence[float], floor_round_ms: float, base: Sample,
                    forwards: int, level: float) -> DraftCost | None:
    """(mean round above ``floor_round_ms``) less (the base's above its floor), per forward;
    None without draft forwards (n-gram lookup) or with too few requests."""
    if forwards <= 0:
        return None
    diff = welch([r - floor_round_ms for r in rounds_ms],
                 [r - base.floor_round_ms for r in base.rounds_ms], level)
    if diff is None:
        return None
    return DraftCost(diff.estimate / forwards, diff.low / forwards, diff.high / forwards,
                     forwards, level)


def precise_enough(rates: Sequence[float], level: float, half_width: float) -> bool:
    """Whether the geometric-mean rate's interval at ``level`` is within ``half_width``
    (relative, on the log scale): the base's stopping rule."""
    logs = _logs(rates)
    if len(logs) < 2:
        return False
    _, sd = _mean_sd(logs)
    return t_quantile(1 - (1 - level) / 2, len(logs) - 1) * sd / math.sqrt(len(logs)) \
        <= half_width


def accept_values(m: Measurement) -> list[float]:
    return [r.decode_tokens / r.verify_steps for r in m.timed if r.verify_steps]


def change(values: Sequence[float], earlier: Sample, level: float) -> Interval | None:
    """This run over the earlier one, as a relative change (-0.074 = 7.4% lower), with its
    Welch interval on the log scale."""
    ratio = speedup(values, earlier, level)
    return Interval(ratio.estimate - 1, ratio.low - 1, ratio.high - 1) if ratio else None
