"""Shares of requests as sequential tests: ``min_goodput`` (the share meeting every SLO) and
a TPOT ceiling at a percentile (the share within the limit must be at least that percentile,
with the percentile's own log-normal bounds beside it: :func:`decide_tpot`).

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
from pytest_specbound.serving.records import RequestRecord

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


def decide_tpot(values: Sequence[float], limit: float, q: float, alpha: float,
                resolution: float, beta: float = MISS_RATE,
                min_n: int = MIN_DECISION) -> Decision:
    """A TPOT ceiling ``limit`` at percentile ``q``: the share test above, and the percentile's
    confidence bounds with the TPOT taken as log-normal (:func:`quantile_bounds`), each given
    half of ``alpha`` and of ``beta``.

    A share alone cannot pass a p99 limit early: each request within it is worth little
    evidence, and it takes some 60 requests at a 5% resolution however far under the limit
    they all are. The bounds use how far. They are read at 4, 8, 16, ... requests (``LOOKS``),
    the j-th look spending ``2**-(j+1)`` of its half of each error rate, so that over every
    look a percentile at the limit fails, and one a resolution beyond it passes, at most that
    half (given log-normal TPOTs). The first look that decides stands: it **fails** once the
    percentile's lower bound is over the limit, and **passes** once its upper bound is under
    ``limit / (1 - resolution)`` with no more requests over the limit than the percentile
    allows. The estimate shown is the percentile measured (nearest rank), the interval the
    bounds at ``1 - alpha``."""
    n = len(values)
    if n == 0:
        return Decision(Side.UNSURE, 0)
    share = decide_share([v <= limit for v in values], q, alpha / 2, resolution, beta / 2,
                         min_n)
    low, high = quantile_bounds(values, q, 1 - alpha) or (None, None)
    side = share.side if share.side is not Side.UNSURE else \
        _first_look(values, limit, q, alpha / 2, resolution, beta / 2, min_n)
    return Decision(side, n, percentile(values, q), low, high)


LOOKS = 4  # the bounds' first look, then every doubling


def _first_look(values: Sequence[float], limit: float, q: float, alpha: float,
                resolution: float, beta: float, min_n: int) -> Side:
    m, j = max(LOOKS, min_n), 0
    while m <= len(values):
        seen = values[:m]
        spend = 2.0 ** -(j + 1)
        failing = quantile_bounds(seen, q, 1 - alpha * spend)
        if failing is not None and failing[0] > limit:
            return Side.BAD
        passing = quantile_bounds(seen, q, 1 - beta * spend)
        if passing is not None and passing[1] < limit / (1 - resolution) \
                and sum(v > limit for v in seen) <= math.floor(m * (1 - q)):
            return Side.OK
        m, j = m * 2, j + 1
    return Side.UNSURE


def quantile_bounds(values: Sequence[float], q: float, level: float
                    ) -> tuple[float, float] | None:
    """One-sided confidence bounds, each at ``level``, on the ``q`` quantile of a log-normal
    sample: ``exp(mean + k sd)`` of the logs with Natrella's approximation of the normal
    tolerance factors k (within about 1% of the exact noncentral-t factors from 10 requests
    on). None with under 4 positive values, or where the approximation does not hold."""
    from statistics import NormalDist, fmean, stdev

    logs = [math.log(v) for v in values if v > 0]
    n = len(logs)
    if n < 4:
        return None
    zp, zg = NormalDist().inv_cdf(q), NormalDist().inv_cdf(level)
    a = 1 - zg * zg / (2 * (n - 1))
    b = zp * zp - zg * zg / n
    root = zp * zp - a * b
    if a <= 0 or root < 0:
        return None
    mean, sd = fmean(logs), stdev(logs)
    return (math.exp(mean + (zp - math.sqrt(root)) / a * sd),
            math.exp(mean + (zp + math.sqrt(root)) / a * sd))


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


def request_ttft_s(r: RequestRecord) -> float:
    """The TTFT a request's SLO is judged on: the server's where the request was timed on the
    server's clock and the server reports one, else the client's."""
    if r.clock == "server" and r.server_ttft_s is not None:
        return r.server_ttft_s
    return r.ttft_s


def percentile(values: Sequence[float], q: float) -> float | None:
    """The ``q`` quantile (0-1) of ``values``, nearest rank."""
    if not values:
        return None
    s = sorted(values)
    return s[min(len(s) - 1, max(0, math.ceil(q * len(s)) - 1))]
