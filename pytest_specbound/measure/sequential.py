"""The sequential verdict: a truncated sequential probability ratio test per threshold.

Each threshold of a class (the accept band's two edges, the efficiency floor, ``min_tok_s``,
``max_ttft_ms``) is one one-sided test on per-request log ratios to the threshold,
``y = log(value / threshold)`` for a floor and ``log(threshold / value)`` for a ceiling, so that
``y >= 0`` is the good side. With the resolution ``r`` (relative; ``d = -log(1 - r)``):

- H0, the truth is at or on the good side of the threshold: mean(y) >= 0;
- H1, the truth is a resolution beyond it: mean(y) <= -d.

For normal y with variance s^2 the log likelihood ratio of H1 over H0 after n requests is
``-(d / s^2) * sum(y_i + d / 2)``. Under H0 its exponential is a nonnegative martingale, so by
Ville's inequality it reaches ``1 / alpha`` with probability at most alpha at any look, however
many looks and whenever sampling stops (Wald 1945; Ville 1939); likewise under H1 it falls to
``beta`` with probability at most beta. So the test fails when the ratio reaches ``log(1/alpha)``
and passes when it falls to ``log(beta)``; a truncated run that reaches neither is inconclusive,
which happens mostly when the truth lies within the resolution of the threshold. The expected
number of requests at H0 or H1 is about half the best fixed-size test's (Wald's approximations).

The point test is fast when the truth sits at H0 or H1 but slow when it is far from both: with
noisy requests (an n-gram drafter's accept length varies 1-4 per request) a truth 80% above a
floor took more than 12 requests, since each request moves the ratio by only ``d (mean + d/2) /
s^2``. So the likelihood ratio is a mixture (Robbins 1970): weight ``POINT_WEIGHT`` on the point
alternative a resolution away, the rest on a half-normal spread of alternatives beyond it (scale
``SPREAD`` in log ratio), in closed form. A mixture of likelihood ratios is still a nonnegative
martingale under the null, with every alternative on the far side of it a supermartingale, so
Ville's bound and the error rates above hold unchanged; the point alternative's boundary moves
by ``log(1 / POINT_WEIGHT)`` (about 4% more requests at H0 or H1, simulated) and a truth far from the
threshold is decided in a few requests.

The variance is unknown: each look uses the sample variance's upper confidence bound at level
``1 - NOISE_QUANTILE`` (chi-square, :func:`stated_noise`), which keeps the likelihood ratio a
supermartingale when the bound holds; ``bench/verdict_cost.py`` checks the error rates this
gives by simulation. A decision must also survive dropping the single request that
most favours it, so one stalled (or one lucky) request cannot decide a threshold on its own.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from statistics import NormalDist
from typing import ClassVar

from pytest_specbound.measure.measurement import Measurement
from pytest_specbound.measure.prefill import floor_s
from pytest_specbound.measure.stats import t_quantile
from pytest_specbound.physics.roofline import Roofline


class Side(str, enum.Enum):
    """Where a threshold's test stands: on the good side, the bad side, or not yet decided."""

    OK = "ok"
    BAD = "bad"
    UNSURE = "unsure"

MISS_RATE = 0.05  # beta: chance of passing a threshold the truth misses by a resolution or more
NOISE_QUANTILE = 0.25  # the variance used is its 75% upper confidence bound
OUTLIER_SCALES = 4.0  # a request this far out may not decide a threshold on its own
MIN_DECISION = 4  # requests before any decision
POINT_WEIGHT = 0.8  # the mixture's mass on the point alternative, a resolution from the null
MORE_CAP = 100_000  # the most requests an estimate of what remains names
SPREAD = 0.25  # scale of the half-normal spread of the rest (log ratio: truths ~25% out)
_NORMAL = NormalDist()


@dataclass(frozen=True)
class Decision:
    """Where one threshold's test stands after ``n`` requests."""

    side: Side
    n: int
    estimate: float | None = None  # geometric mean of the per-request values
    low: float | None = None  # interval of that mean (level 1 - 2 alpha)
    high: float | None = None
    more: int | None = None  # requests the test expects to still need (None: decided)

    def to_json(self) -> dict[str, object]:
        return {"side": Side(self.side).value, "n": self.n, "estimate": self.estimate,
                "low": self.low, "high": self.high, "more": self.more}


def _mean_sd(ys: Sequence[float]) -> tuple[float, float]:
    n = len(ys)
    mean = sum(ys) / n
    var = sum((y - mean) ** 2 for y in ys) / (n - 1) if n > 1 else 0.0
    return mean, math.sqrt(var)


def chi2_quantile(p: float, df: int) -> float:
    """Chi-square quantile: exact for 1 and 2 degrees of freedom, Wilson-Hilferty above."""
    if df == 1:
        return _NORMAL.inv_cdf((1 + p) / 2) ** 2
    if df == 2:
        return -2 * math.log(1 - p)
    z = _NORMAL.inv_cdf(p)
    return df * (1 - 2 / (9 * df) + z * math.sqrt(2 / (9 * df))) ** 3


def stated_noise(ys: Sequence[float]) -> float:
    """The per-request variance the test uses: the sample variance's upper confidence bound at
    level ``1 - NOISE_QUANTILE`` (an SPRT run with an overstated variance keeps its guarantee:
    its likelihood ratio is then a supermartingale under either hypothesis)."""
    _, sd = _mean_sd(ys)
    return _variance_bound(sd, len(ys))


def _variance_bound(sd: float, n: int) -> float:
    """The upper confidence bound of :func:`stated_noise` for a sample sd over ``n`` requests."""
    return (n - 1) * sd * sd / chi2_quantile(NOISE_QUANTILE, n - 1)


def _half_normal_tail(x: float) -> float:
    """``x^2 / 2 + log Phi(x)``, finite far into the lower tail (Mills' ratio there)."""
    if x > -30:
        return x * x / 2 + math.log(max(_NORMAL.cdf(x), 1e-300))
    return -math.log(-x * math.sqrt(2 * math.pi))


def log_evidence(total: float, n: int, var: float, d: float,
                 weight: float | None = None) -> float:
    """log of the mixture likelihood ratio of "mean > 0" over "mean = 0" for ``n`` normal
    observations of variance ``var`` summing to ``total``: ``weight`` (default
    ``POINT_WEIGHT``) on the mean ``d``, the rest on a half-normal (scale ``SPREAD``) over
    means above 0. For the half-normal,
    ``integral exp((m S - n m^2 / 2) / v) 2 phi(m / t) / t dm = 2 / (t sqrt(a)) exp(b^2 / 2a)
    Phi(b / sqrt(a))`` with ``a = n / v + 1 / t^2`` and ``b = S / v``."""
    weight = POINT_WEIGHT if weight is None else weight
    point = (d * total - n * d * d / 2) / var
    a = n / var + 1 / SPREAD**2
    spread = math.log(2 / (SPREAD * math.sqrt(a))) + _half_normal_tail(total / var / math.sqrt(a))
    terms = [math.log(w) + t for w, t in ((weight, point), (1 - weight, spread))
             if w > 0]
    hi = max(terms)
    return hi + math.log(sum(math.exp(t - hi) for t in terms))


def _crossed(ys: Sequence[float], d: float, log_bound: float, towards_bad: bool) -> bool:
    """Whether the evidence against the side ``ys`` leaves reaches ``log_bound``: against
    mean >= 0 (``towards_bad``: the observations ``-y``) or against mean <= -d (``y + d``)."""
    n = len(ys)
    if n < 2:
        return False
    var = stated_noise(ys)
    if var <= 0:
        var = 1e-12
    total = -sum(ys) if towards_bad else sum(ys) + n * d
    return log_evidence(total, n, var, d) >= log_bound


def decide(ys: Sequence[float], alpha: float, resolution: float, beta: float = MISS_RATE,
           min_n: int = MIN_DECISION) -> Decision:
    """The sequential test on per-request log ratios ``ys`` (good side positive)."""
    n = len(ys)
    if n == 0:
        return Decision(Side.UNSURE, 0)
    d = -math.log(1 - resolution)
    mean, sd = _mean_sd(ys)
    side = Side.UNSURE
    if n >= min_n:
        alone_low, alone_high = outliers(ys)
        if _crossed(ys, d, math.log(1 / alpha), True) and \
                (not alone_low or _crossed(sorted(ys)[1:], d, math.log(1 / alpha), True)):
            side = Side.BAD
        elif _crossed(ys, d, math.log(1 / beta), False) and \
                (not alone_high or _crossed(sorted(ys)[:-1], d, math.log(1 / beta), False)):
            side = Side.OK
    low = high = None
    if n >= 2 and sd > 0:
        q = t_quantile(1 - alpha, n - 1) * sd / math.sqrt(n)
        low, high = mean - q, mean + q
    elif n >= 1:
        low = high = mean
    more = None if side is not Side.UNSURE else _more(n, mean, sd, d, alpha, beta)
    return Decision(side, n, mean, low, high, more)


def passes(ys: Sequence[float], resolution: float, beta: float = MISS_RATE,
           min_n: int = MIN_DECISION) -> bool:
    """Whether the test's pass boundary is crossed (the truth is not a resolution or more on
    the bad side), whether or not its fail boundary is crossed too: :func:`decide` lets a
    failure win; a two-sample comparison asks each boundary of its own bound."""
    if len(ys) < max(min_n, 2):
        return False
    d = -math.log(1 - resolution)
    _, alone_high = outliers(ys)
    return _crossed(ys, d, math.log(1 / beta), False) and \
        (not alone_high or _crossed(sorted(ys)[:-1], d, math.log(1 / beta), False))


def _more(n: int, mean: float, sd: float, d: float, alpha: float, beta: float) -> int | None:
    """Requests still needed if the mean and spread so far held: the first count at which the
    evidence towards the side the mean lies on (pass above ``-d/2``, fail below) reaches its
    boundary, capped at ``MORE_CAP`` (None: no drift, or beyond the cap)."""
    if n < 2 or sd <= 0:
        return None
    drift = mean + d / 2
    if abs(drift) < 1e-12:
        return None
    z, bound = (mean + d, math.log(1 / beta)) if drift > 0 else (-mean, math.log(1 / alpha))

    def crosses(k: int) -> bool:  # the variance as the test would state it after k requests
        return log_evidence(k * z, k, _variance_bound(sd, k), d) >= bound

    hi = n + 1
    while not crosses(hi):
        if hi >= MORE_CAP:
            return None
        hi = min(2 * hi, MORE_CAP)
    lo = max(n, hi // 2)  # crosses(lo) is false or lo == n
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if crosses(mid) else (mid, hi)
    return max(1, hi - n)


def outliers(ys: Sequence[float], k: float = OUTLIER_SCALES) -> tuple[bool, bool]:
    """Whether the lowest and the highest of ``ys`` lie more than ``k`` robust standard
    deviations (1.4826 x the median absolute deviation) from the median."""
    if len(ys) < 3:
        return False, False
    s = sorted(ys)
    med = s[len(s) // 2] if len(s) % 2 else (s[len(s) // 2 - 1] + s[len(s) // 2]) / 2
    dev = sorted(abs(y - med) for y in s)
    mad = dev[len(dev) // 2] if len(dev) % 2 else (dev[len(dev) // 2 - 1] + dev[len(dev) // 2]) / 2
    scale = 1.4826 * mad
    return med - s[0] > k * scale, s[-1] - med > k * scale


class Metric(str, enum.Enum):
    """A per-request figure a threshold is tested on (:func:`per_request`)."""

    ACCEPT_LENGTH = "accept_length"
    EFFICIENCY = "efficiency"
    DECODE_TOK_S = "decode_tok_s"
    TTFT_MS = "ttft_ms"


class Threshold(str):
    """One one-sided test a class can run (the accept band is two): the string is its key in
    the results JSON's ``tests`` (a threshold equals its key, as decisions are read back by
    it); ``metric``, the per-request figure it reads; ``floor``, whether the value must be at
    least the threshold (else at most); ``label``, its name in the evidence. The built-in
    ones are attributes of this class; a threshold declared elsewhere makes its own."""

    metric: Metric
    floor: bool
    label: str

    ACCEPT_LOW: ClassVar[Threshold]
    ACCEPT_HIGH: ClassVar[Threshold]
    EFFICIENCY: ClassVar[Threshold]
    DECODE_TOK_S: ClassVar[Threshold]
    TTFT_MS: ClassVar[Threshold]
    SPEEDUP: ClassVar[Threshold]
    TPOT_MS: ClassVar[Threshold]
    GOODPUT: ClassVar[Threshold]
    BASELINE_DECODE: ClassVar[Threshold]
    BASELINE_ACCEPT: ClassVar[Threshold]

    def __new__(cls, value: str, metric: Metric, floor: bool = True,
                label: str = "") -> Threshold:
        made = super().__new__(cls, value)
        made.metric, made.floor, made.label = metric, floor, label or value
        return made

    @property
    def value(self) -> str:
        return str.__str__(self)

    def __reduce__(self) -> tuple[type[Threshold], tuple[str, Metric, bool, str]]:
        return Threshold, (self.value, self.metric, self.floor, self.label)  # copy, pickle

    def __repr__(self) -> str:
        return f"Threshold({self.value!r})"


Threshold.ACCEPT_LOW = Threshold("accept_low", Metric.ACCEPT_LENGTH, True, "accept")
Threshold.ACCEPT_HIGH = Threshold("accept_high", Metric.ACCEPT_LENGTH, False, "accept")
Threshold.EFFICIENCY = Threshold("efficiency", Metric.EFFICIENCY, True, "efficiency")
Threshold.DECODE_TOK_S = Threshold("decode_tok_s", Metric.DECODE_TOK_S, True, "decode tok/s")
Threshold.TTFT_MS = Threshold("ttft_ms", Metric.TTFT_MS, False, "TTFT ms")
# over the server without speculation (measure/speedup.py)
Threshold.SPEEDUP = Threshold("speedup", Metric.DECODE_TOK_S, True, "speedup")
# shares of requests, tested by measure/proportion.py: a TPOT ceiling at its percentile, and the
# share of requests meeting every SLO
Threshold.TPOT_MS = Threshold("tpot_ms", Metric.TTFT_MS, False, "TPOT ms at its percentile")
Threshold.GOODPUT = Threshold("goodput", Metric.TTFT_MS, True, "goodput")
# no slower, and no lower accept, than the last accepted run
Threshold.BASELINE_DECODE = Threshold("baseline_decode_tok_s", Metric.DECODE_TOK_S, True,
                                      "decode vs baseline")
Threshold.BASELINE_ACCEPT = Threshold("baseline_accept_length", Metric.ACCEPT_LENGTH, True,
                                      "accept vs baseline")


@dataclass(frozen=True)
class Limit:
    """One threshold at its value: the test's scale (log ratios, good side >= 0) and back."""

    threshold: Threshold
    value: float

    @property
    def metric(self) -> Metric:
        return self.threshold.metric

    @property
    def floor(self) -> bool:
        return self.threshold.floor

    def log_ratios(self, values: Sequence[float]) -> list[float]:
        good = [v for v in values if v > 0]
        return [math.log(v / self.value) if self.floor else math.log(self.value / v)
                for v in good]

    def back(self, y: float | None) -> float | None:
        """A mean log ratio back on the metric's scale."""
        if y is None or not math.isfinite(y):
            return None
        return self.value * math.exp(y if self.floor else -y)


def transient(values: Sequence[float], sigmas: float = 3.0) -> int:
    """Leading requests to drop as a warm-up transient: MSER's truncation point (White, 1997:
    the d that minimises the standard error of the mean of the rest), searched over the first
    third, kept only when those d requests are slower (lower ``values``, log rates) than the
    rest by ``sigmas`` standard errors; else 0. Needs 8 requests."""
    n = len(values)
    if n < 8:
        return 0
    best, best_d = math.inf, 0
    for d in range(0, n // 3 + 1):
        rest = values[d:]
        m = sum(rest) / len(rest)
        score = sum((v - m) ** 2 for v in rest) / len(rest) ** 2
        if score < best:
            best, best_d = score, d
    if best_d == 0:
        return 0
    head, rest = values[:best_d], values[best_d:]
    mean_rest, sd_rest = _mean_sd(rest)
    gap = mean_rest - sum(head) / len(head)
    se = sd_rest * math.sqrt(1 / len(head) + 1 / len(rest))
    return best_d if gap > sigmas * max(se, 1e-9) else 0


def with_transient(m: Measurement) -> Measurement:
    """``m`` with its leading warm-up transient (see :func:`transient`) excluded from the
    figures (failed requests among them stay counted as failures). One request at a time only:
    in a closed loop requests finish out of order and the streams' warm-ups cover the start."""
    if m.concurrency > 1:
        return m
    at = [i for i, r in enumerate(m.records) if r.ok and r.decode_s > 0]
    k = transient([math.log(m.records[i].decode_tokens / m.records[i].decode_s) for i in at])
    cut = at[k - 1] + 1 if k else 0
    return m if cut == m.transient else replace(m, transient=cut)


def per_request(m: Measurement, metric: Metric, roof: Roofline) -> list[float]:
    """Each timed request's value of ``metric``; efficiency is the request's least decode time
    over its measured one: its rounds at the roofline (at its accept length, else the level's
    window accept, else 1, where requests have no accept of their own) plus the other requests'
    prefill in them (:mod:`pytest_specbound.measure.prefill`)."""
    recs = m.timed
    if metric is Metric.DECODE_TOK_S:
        return [r.decode_tokens / r.decode_s for r in recs]
    if metric is Metric.TTFT_MS:
        return [r.ttft_s * 1e3 for r in m.counted if r.ok and r.clock == "client" and r.ttft_s > 0]
    if metric is Metric.ACCEPT_LENGTH:
        return [r.decode_tokens / r.verify_steps for r in recs if r.verify_steps]
    fixed = m.window_accept or 1.0
    overlap = {id(r): o for r, o in m.timed_overlaps()}
    return [floor_s(r, overlap.get(id(r)), roof, fixed) / r.decode_s for r in recs]
