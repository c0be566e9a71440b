"""A class's thresholds as sequential tests, and the stopping rule that runs them."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from pytest_specbound.gate.budget import ClassBudget
from pytest_specbound.gate.verdict import judge
from pytest_specbound.measure.measurement import Measurement, Stop
from pytest_specbound.measure.prefill import level_roofline
from pytest_specbound.measure.sequential import (
    DEFAULT_RESOLUTION,
    MIN_DECISION,
    Decision,
    Threshold,
    decide,
    per_request,
    with_transient,
)
from pytest_specbound.measure.stats import bounds
from pytest_specbound.physics.roofline import Roofline


def thresholds(cls: ClassBudget) -> list[Threshold]:
    """Every one-sided test the class asks for (the accept band is two)."""
    out: list[Threshold] = []
    if cls.accept is not None:
        out += [Threshold("accept_low", "accept_length", cls.accept[0], True),
                Threshold("accept_high", "accept_length", cls.accept[1], False)]
    if cls.min_efficiency is not None:
        out.append(Threshold("efficiency", "efficiency", cls.min_efficiency, True))
    if cls.min_tok_s is not None:
        out.append(Threshold("decode_tok_s", "decode_tok_s", cls.min_tok_s, True))
    if cls.max_ttft_ms is not None:
        out.append(Threshold("ttft_ms", "ttft_ms", cls.max_ttft_ms, False))
    return out


def per_threshold_alpha(confidence: float, tests: int) -> float:
    """False-failure rate of each test so that the class's stays at ``1 - confidence``
    (Bonferroni over the class's thresholds)."""
    return (1 - confidence) / max(1, tests)


def decisions(cls: ClassBudget, m: Measurement, roof: Roofline, confidence: float,
              resolution: float, min_n: int = MIN_DECISION) -> dict[str, Decision]:
    """Each threshold's sequential test on ``m`` (its warm-up transient already excluded)."""
    tests = thresholds(cls)
    alpha = per_threshold_alpha(confidence, len(tests))
    out: dict[str, Decision] = {}
    for t in tests:
        if t.value <= 0:  # a floor of 0 holds and a ceiling of 0 fails, whatever is measured
            out[t.key] = Decision("ok" if t.floor else "bad", len(m.ok))
            continue
        if t.metric == "accept_length" and (t.value <= 1.0 if t.floor
                                            else t.value >= roof.max_accept):
            # one token per forward at least, drafts + 1 at most: nothing to test
            out[t.key] = Decision("ok", len(m.ok))
            continue
        if t.metric == "accept_length" and not any(r.verify_steps for r in m.ok):
            out[t.key] = _fixed(t, m.accept_length, len(m.ok))
            continue
        values = per_request(m, t.metric, roof)
        d = decide(t.log_ratios(values), alpha, resolution, min_n=min_n)
        out[t.key] = Decision(d.side, d.n, t.back(d.estimate), *_interval(t, d), d.more)
    return out


def _interval(t: Threshold, d: Decision) -> tuple[float | None, float | None]:
    ends = sorted(x for x in (t.back(d.low), t.back(d.high)) if x is not None)
    return (ends[0], ends[-1]) if ends else (None, None)


def _fixed(t: Threshold, value: float | None, n: int) -> Decision:
    """An accept length with no per-request figures (the counters' whole-window total): no
    noise to test, the value is compared as it is."""
    if value is None:
        return Decision("unsure", n)
    good = value >= t.value if t.floor else value <= t.value
    return Decision("ok" if good else "bad", n, value, value, value)


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
    last_bounds: dict[str, tuple[float, float]] | None = None
    last_decisions: dict[str, Decision] = field(default_factory=dict)
    last_level: float = 0.0

    def __post_init__(self) -> None:  # a class budget under the minimum lowers it
        self.min_samples = max(2, min(self.min_samples, self.max_samples))

    @property
    def sample_budget(self) -> int:
        return self.max_samples

    @property
    def level(self) -> float:
        """Confidence level of the intervals reported beside the tests (two-sided, 2 alpha)."""
        return 1 - 2 * per_threshold_alpha(self.confidence, len(thresholds(self.budget)))

    def looks_at(self, n: int) -> bool:
        return n >= min(self.min_samples, self.max_samples)

    def settle(self, m: Measurement) -> Measurement:
        """Exclude the warm-up transient and run every test on what remains."""
        m = with_transient(m)
        self.last_level = self.level
        self.last_decisions = decisions(self.budget, m, self.roof, self.confidence,
                                        self.resolution, min(MIN_DECISION, self.min_samples))
        self.last_bounds = bounds(m, level_roofline(m, self.roof).round_ms, self.last_level,
                                  self.roof.max_accept)
        return m

    def stop_reason(self, m: Measurement) -> tuple[Stop, str] | None:
        n = len(m.records)
        if m.failures:
            return Stop.REQUEST_FAILED, "a request failed"
        if not self.looks_at(n):
            return None
        m = self.settle(m)
        status = judge(self.budget, m, self.roof, self.last_decisions, final=False).status
        if status in ("pass", "fail"):
            return Stop.DECIDED, f"decided after {n} requests"
        if n >= self.max_samples:
            return Stop.SAMPLE_BUDGET, f"sample budget of {self.max_samples} requests"
        return None


def resolution_of(cls: ClassBudget, default: float) -> float:
    value = cls.resolution if cls.resolution is not None else default
    return value if math.isfinite(value) else default
