"""Shares of requests as sequential tests: ``min_goodput`` (the share meeting every SLO) and
``max_tpot_ms`` at a percentile (the share within the limit must be at least that percentile).

Each request is a Bernoulli trial (met or not). The test is Wald's SPRT for a proportion:
H0, the true share is at least ``p0`` (the threshold); H1, it is at most ``p0 - delta``. After
``k`` successes in ``n`` trials the log likelihood ratio of H1 over H0 is
``k log(p1/p0) + (n - k) log((1 - p1)/(1 - p0))``; the test fails at ``log(1/alpha)`` and passes
at ``log(beta)``, and by Ville's inequality a share at or above ``p0`` fails with probability at
most alpha however many looks are taken (likewise for beta). The alternative scales the share
that misses: at a 5% resolution, a p99 limit (1% may miss) is tested against 2% missing, and a
goodput floor of 0.95 against 0.90 (:func:`alternative`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from pytest_specbound.measure.measurement import Measurement
from pytest_specbound.measure.sequential import MIN_DECISION, MISS_RATE, Decision, Side

MISS_SCALE = 20.0  # a 5% resolution on a p99 limit: 1% missing against 2% missing


def alternative(p0: float, resolution: float) -> float:
    """The share a resolution beyond ``p0``: the miss share grows by ``resolution x MISS_SCALE``
    (at least 0.5 percentage points; at most half of ``p0``)."""
    miss = 1 - p0
    p1 = p0 - max(0.005, min(p0 / 2, max(miss, 0.01) * resolution * MISS_SCALE))
    return max(p1, 1e-6)


def decide_share(met: Sequence[bool], p0: float, alpha: float, resolution: float,
                 beta: float = MISS_RATE, min_n: int = MIN_DECISION) -> Decision:
    """The SPRT on whether at least ``p0`` of requests meet their limit."""
    n, k = len(met), sum(met)
    if n == 0:
        return Decision(Side.UNSURE, 0)
    share = k / n
    low, high = wilson(k, n, 1 - 2 * alpha)
    if p0 <= 0:
        return Decision(Side.OK, n, share, low, high)
    p1 = alternative(p0, resolution)
    llr = (k * math.log(p1 / p0) if k else 0.0) + \
        ((n - k) * math.log((1 - p1) / (1 - p0)) if n - k and p0 < 1 else 0.0)
    if p0 >= 1 and n - k:
        llr = math.inf  # a share of 1 required and one request missed
    side = Side.UNSURE
    if n >= min_n and llr >= math.log(1 / alpha):
        side = Side.BAD
    elif n >= min_n and llr <= math.log(beta):
        side = Side.OK
    return Decision(side, n, share, low, high)


def wilson(k: int, n: int, level: float) -> tuple[float, float]:
    """Wilson's score interval for a share ``k / n`` at ``level``."""
    from statistics import NormalDist

    z = NormalDist().inv_cdf(1 - (1 - level) / 2)
    p = k / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return max(0.0, centre - half), min(1.0, centre + half)


def tpot_values(m: Measurement) -> list[float]:
    """Each timed request's time per output token after the first (ms)."""
    return [r.decode_s * 1e3 / r.decode_tokens for r in m.timed if r.decode_tokens]


def met_slos(m: Measurement, max_ttft_ms: float | None, max_tpot_ms: float | None) -> list[bool]:
    """Per timed request: whether it met every SLO the class sets (TTFT on the client's clock)."""
    out = []
    for r in m.timed:
        ok = max_ttft_ms is None or r.ttft_s * 1e3 <= max_ttft_ms
        if max_tpot_ms is not None and r.decode_tokens:
            ok = ok and r.decode_s * 1e3 / r.decode_tokens <= max_tpot_ms
        out.append(ok)
    return out


def percentile(values: Sequence[float], q: float) -> float | None:
    """The ``q`` quantile (0-1) of ``values``, nearest rank."""
    if not values:
        return None
    s = sorted(values)
    return s[min(len(s) - 1, max(0, math.ceil(q * len(s)) - 1))]
