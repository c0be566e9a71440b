"""A class's thresholds as sequential tests, and the stopping rule that runs them."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from pytest_specbound.gate.judging.judge import decided
from pytest_specbound.gate.references.comparison import Comparison
from pytest_specbound.gate.schema.class_budget import ClassBudget
from pytest_specbound.gate.verdicts.evaluate import Decisions
from pytest_specbound.gate.verdicts.thresholds import by_test, own_limits
from pytest_specbound.measure.measurement import Measurement, Stop
from pytest_specbound.measure.prefill import level_roofline
from pytest_specbound.measure.sequential import (
    MIN_DECISION,
    Decision,
    Limit,
    Metric,
    Side,
    Threshold,
    decide,
    per_request,
    with_transient,
)
from pytest_specbound.measure.speedup import precise_enough, spec_rates
from pytest_specbound.measure.stats import bounds
from pytest_specbound.physics.roofline import Roofline
from pytest_specbound.values import DEFAULT_RESOLUTION


def limits(cls: ClassBudget, comparisons: Sequence[Comparison] = ()) -> list[Limit]:
    """Every one-sided test the class asks for: its thresholds' (the accept band is two) and
    its comparisons'."""
    return own_limits(cls.limits) + [t for c in comparisons for t in c.limits(cls.limits)]


def per_threshold_alpha(confidence: float, tests: int) -> float:
    """False-failure rate of each test so that the class's stays at ``1 - confidence``
    (Bonferroni over the class's thresholds)."""
    return (1 - confidence) / max(1, tests)


def decisions(cls: ClassBudget, m: Measurement, roof: Roofline, confidence: float,
              resolution: float, min_n: int = MIN_DECISION,
              comparisons: Sequence[Comparison] = ()) -> dict[Threshold, Decision]:
    """Each threshold's sequential test on ``m`` (its warm-up transient already excluded)."""
    tests = limits(cls, comparisons)
    alpha = per_threshold_alpha(confidence, len(tests))
    owner = {t.threshold: c for c in comparisons for t in c.limits(cls.limits)}
    out: dict[Threshold, Decision] = {}
    specs = by_test()
    for t in tests:
        spec = specs[t.threshold] if t.threshold not in owner else None
        if t.threshold in owner:
            out[t.threshold] = owner[t.threshold].decide(t, m, alpha, resolution, min_n)
        elif spec is not None and spec.share is not None:
            out[t.threshold] = spec.share(cls, m, t.value, alpha, resolution, min_n)
        else:
            out[t.threshold] = _decide(t, m, roof, alpha, resolution, min_n)
    return out


def _decide(t: Limit, m: Measurement, roof: Roofline, alpha: float, resolution: float,
            min_n: int) -> Decision:
    """One threshold's test on the per-request values (log ratios to the threshold)."""
    if t.value <= 0:  # a floor of 0 holds and a ceiling of 0 fails, whatever is measured
        return Decision(Side.OK if t.floor else Side.BAD, len(m.ok))
    if t.metric is Metric.ACCEPT_LENGTH:
        if t.value <= 1.0 if t.floor else t.value >= roof.max_accept:
            return Decision(Side.OK, len(m.ok))  # 1 token per forward at least, drafts + 1 at most
        if not any(r.verify_steps for r in m.ok):
            return _fixed(t, m.accept_length, len(m.ok))
    d = decide(t.log_ratios(per_request(m, t.metric, roof)), alpha, resolution, min_n=min_n)
    return Decision(d.side, d.n, t.back(d.estimate), *_interval(t, d), d.more)


def _interval(t: Limit, d: Decision) -> tuple[float | None, float | None]:
    ends = sorted(x for x in (t.back(d.low), t.back(d.high)) if x is not None)
    return (ends[0], ends[-1]) if ends else (None, None)


def _fixed(t: Limit, value: float | None, n: int) -> Decision:
    """An accept length with no per-request figures (the counters' whole-window total): no
    noise to test, the value is compared as it is."""
    if value is None:
        return Decision(Side.UNSURE, n)
    good = value >= t.value if t.floor else value <= t.value
    return Decision(Side.OK if good else Side.BAD, n, value, value, value)


@dataclass(frozen=True)
class Look:
    """The rule's reading of a measurement: its transient excluded, every threshold's test, and
    the intervals reported beside them (at ``level``)."""

    measurement: Measurement
    decisions: Decisions = field(default_factory=dict)
    bounds: Mapping[str, tuple[float, float]] | None = None
    level: float = 0.0

    def tests_json(self) -> dict[str, object]:
        return {k.value: d.to_json() for k, d in self.decisions.items()}


@dataclass
class SequentialRule:
    """Look after every request from ``min_samples`` on; stop when every threshold is decided
    or one has failed, or at the sample budget."""

    budget: ClassBudget
    roof: Roofline
    confidence: float
    min_samples: int
    max_samples: int
    resolution: float = DEFAULT_RESOLUTION
    comparisons: Sequence[Comparison] = ()  # the twin's, the last accepted run's
    precision: float | None = None  # also stop only once the decode rate is this precise
    _memo: tuple[tuple[object, ...], Look] | None = field(default=None, repr=False)

    def __post_init__(self) -> None:  # a class budget under the minimum lowers it
        self.min_samples = max(2, min(self.min_samples, self.max_samples))

    @property
    def sample_budget(self) -> int:
        return self.max_samples

    @property
    def level(self) -> float:
        """Confidence level of the intervals reported beside the tests (two-sided, 2 alpha)."""
        tests = limits(self.budget, self.comparisons)
        return 1 - 2 * per_threshold_alpha(self.confidence, len(tests))

    def looks_at(self, n: int) -> bool:
        return n >= min(self.min_samples, self.max_samples)

    def look(self, m: Measurement) -> Look:
        """Exclude the warm-up transient and run every test on what remains (a value: the
        rule keeps only a cache of its latest look, keyed by what the measurement holds)."""
        key = (m.records, m.window_accept, len(m.untimed), len(m.drained))
        if self._memo is not None and self._memo[0] == key:
            return self._memo[1]
        settled = with_transient(m)
        found = decisions(self.budget, settled, self.roof, self.confidence, self.resolution,
                          min(MIN_DECISION, self.min_samples), self.comparisons)
        look = Look(settled, found, bounds(settled, level_roofline(settled, self.roof).round_ms,
                                           self.level, self.roof.max_accept), self.level)
        self._memo = (key, look)
        return look

    def stop_reason(self, m: Measurement) -> tuple[Stop, str] | None:
        n = len(m.records)
        if m.failures:
            return Stop.REQUEST_FAILED, "a request failed"
        if not self.looks_at(n):
            return None
        look = self.look(m)
        if decided(self.budget, look.measurement, self.roof, look.decisions,
                   self.comparisons) and self._precise(look.measurement):
            return Stop.DECIDED, f"decided after {n} requests"
        if n >= self.max_samples:
            return Stop.SAMPLE_BUDGET, f"sample budget of {self.max_samples} requests"
        return None


    def _precise(self, m: Measurement) -> bool:
        return self.precision is None or precise_enough(spec_rates(m), self.level, self.precision)


def resolution_of(cls: ClassBudget, default: float) -> float:
    value = cls.resolution if cls.resolution is not None else default
    return value if math.isfinite(value) else default
