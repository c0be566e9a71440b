"""Confidence bounds for ratio-of-sums estimates, and a sequential stopping rule.

Decode tok/s is sum(tokens) / sum(decode seconds) and accept length is sum(tokens) /
sum(verify steps), both over requests of different lengths: their intervals use the delta
method for a ratio estimator, se^2 = sum((y_i - R x_i)^2) / (n (n - 1) xbar^2), with a Student-t
quantile. Efficiency (measured over roofline at the measured accept length) simplifies to
roofline round time x sum(verify steps) / sum(decode seconds), itself a ratio of sums, so the
accept length's uncertainty is carried through exactly.

These intervals are what the report shows; the verdict itself is the sequential test of
:mod:`pytest_specbound.measure.sequential`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from statistics import NormalDist

from pytest_specbound.measure.measurement import Measurement
from pytest_specbound.serving.records import RequestRecord


def t_two_sided_mass(t: float, df: int) -> float:
    """P(|T| <= t) for Student's t with integer ``df``: the finite sums of Abramowitz and Stegun
    26.7.3 (odd df) and 26.7.4 (even df) in theta = atan(t / sqrt(df)); exact up to rounding."""
    theta = math.atan(abs(t) / math.sqrt(df))
    c2 = math.cos(theta) ** 2
    if df % 2:  # odd: (2/pi) (theta + sin cos (1 + 2/3 cos^2 + (2 4)/(3 5) cos^4 + ...))
        term, total = 1.0, 1.0 if df > 1 else 0.0
        for k in range(1, (df - 1) // 2):
            term *= c2 * (2 * k) / (2 * k + 1)
            total += term
        return 2 / math.pi * (theta + math.sin(theta) * math.cos(theta) * total)
    term, total = 1.0, 1.0  # even: sin (1 + 1/2 cos^2 + (1 3)/(2 4) cos^4 + ...)
    for k in range(1, df // 2):
        term *= c2 * (2 * k - 1) / (2 * k)
        total += term
    return math.sin(theta) * total


def t_quantile(p: float, df: int) -> float:
    """Student-t quantile: closed forms for df 1 and 2, else the exact CDF inverted by bisection.

    df <= 0 gives the normal quantile (no degrees of freedom to speak of).
    """
    if not 0 < p < 1:
        raise ValueError(f"p must be in (0, 1), got {p}")
    if df <= 0:
        return NormalDist().inv_cdf(p)
    if p < 0.5:
        return -t_quantile(1 - p, df)
    if df == 1:
        return math.tan(math.pi * (p - 0.5))
    if df == 2:
        return (2 * p - 1) / math.sqrt(2 * p * (1 - p))
    target = 2 * p - 1
    lo, hi = 0.0, math.pi / 2  # bisection on theta: the mass grows monotonically with it
    for _ in range(200):
        mid = (lo + hi) / 2
        if t_two_sided_mass(math.sqrt(df) * math.tan(mid), df) < target:
            lo = mid
        else:
            hi = mid
        if hi - lo < 1e-15:
            break
    return math.sqrt(df) * math.tan((lo + hi) / 2)


@dataclass(frozen=True)
class Interval:
    estimate: float
    low: float
    high: float


def ratio_interval(ys: Sequence[float], xs: Sequence[float], level: float) -> Interval | None:
    """Two-sided interval for sum(ys) / sum(xs) at confidence ``level``."""
    n = len(ys)
    sx = sum(xs)
    if n == 0 or sx <= 0:
        return None
    r = sum(ys) / sx
    if n < 2:
        return Interval(r, -math.inf, math.inf)
    xbar = sx / n
    resid = sum((y - r * x) ** 2 for y, x in zip(ys, xs, strict=False))
    se = math.sqrt(resid / (n * (n - 1))) / xbar
    q = t_quantile(1 - (1 - level) / 2, n - 1)
    return Interval(r, r - q * se, r + q * se)


def bounds(measured: Measurement | Sequence[RequestRecord], round_ms: float, level: float,
           max_accept: float | None = None) -> dict[str, tuple[float, float]]:
    """Intervals for ``decode_tok_s``, ``accept_length``, ``efficiency`` and
    ``aggregate_tok_s`` at ``level``.

    Where the accept length comes from server counters over the level's window (no per-request
    figure), it has no interval: it is the server's own total, and efficiency's interval is the
    decode rate's, scaled by it.
    """
    m = measured if isinstance(measured, Measurement) else Measurement("", tuple(measured))
    ok = m.timed
    tokens = [float(r.decode_tokens) for r in ok]
    seconds = [r.decode_s for r in ok]
    out: dict[str, tuple[float, float]] = {}
    rate = ratio_interval(tokens, seconds, level)
    if rate:
        out["decode_tok_s"] = (rate.low, rate.high)
    with_steps = [r for r in ok if r.verify_steps]
    steps = [r.verify_steps or 0.0 for r in with_steps]
    accept = ratio_interval([float(r.decode_tokens) for r in with_steps], steps, level)
    if accept:
        out["accept_length"] = (accept.low, accept.high)
        if max_accept is None or accept.estimate <= max_accept:
            eff = ratio_interval(steps, [r.decode_s for r in with_steps], level)
            if eff:
                s = round_ms / 1e3
                out["efficiency"] = (eff.low * s, eff.high * s)
    elif rate:  # no per-request accept: the window's (fixed), else 1 (no speculation)
        fixed = m.window_accept or 1.0
        if m.window_accept is not None:
            out["accept_length"] = (fixed, fixed)
        if max_accept is None or fixed <= max_accept:
            s = round_ms / 1e3 / fixed
            out["efficiency"] = (rate.low * s, rate.high * s)
    pairs = m.timed_overlaps()
    aggregate = ratio_interval([float(r.decode_tokens) for r, _ in pairs],
                               [o.share_s for _, o in pairs], level)
    if aggregate:
        out["aggregate_tok_s"] = (aggregate.low, aggregate.high)
    return out
