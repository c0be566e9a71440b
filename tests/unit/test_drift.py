"""The twin's drift check: its two blocks' ratio, their pool, and the reason a cost per draft
forward below zero carries."""

from __future__ import annotations

import math

from pytest_specbound.gate.references.drift import Drift, impossible_cost, pooled
from pytest_specbound.measure.speedup import DraftCost, Sample


def sample(rate: float, n: int = 6, spread: float = 0.02) -> Sample:
    rates = tuple(rate * (1 + spread * ((i % 3) - 1)) for i in range(n))
    return Sample(rates, tuple(1e3 / r for r in rates), 5.0, 200.0, "plain")


def test_a_twin_ten_percent_slower_after_its_class_is_seen():
    d = Drift.between(sample(100.0), sample(90.0), 0.9)
    assert d is not None and d.seen
    assert d.ratio.estimate == sample(90.0).decode_tok_s / sample(100.0).decode_tok_s
    assert d.ratio.high < 1 and d.to_json()["change"] < -0.09
    assert d.line().startswith("drift: the twin's rate moved -10.0% [")
    assert "6 requests before the class, 6 after" in d.line()


def test_a_steady_twin_is_not_seen():
    d = Drift.between(sample(100.0), sample(100.5), 0.9)
    assert d is not None and not d.seen and d.ratio.low < 1 < d.ratio.high


def test_one_request_after_has_no_interval():
    assert Drift.between(sample(100.0), sample(90.0, n=1), 0.9) is None


def test_the_pool_sits_between_its_blocks_and_is_wider():
    a, b = sample(100.0), sample(80.0)
    p = pooled(a, b)
    assert p.n == 12 and p.command == "plain" and p.floor_round_ms == 5.0
    assert math.isclose(p.decode_tok_s, math.sqrt(a.decode_tok_s * b.decode_tok_s))
    assert p.bound(0.95, upper=True) / p.bound(0.95, upper=False) \
        > a.bound(0.95, upper=True) / a.bound(0.95, upper=False)


def test_a_cost_below_zero_says_why_and_a_possible_one_says_nothing():
    negative, positive = DraftCost(-1.2, -2.0, -0.4, 3, 0.9), DraftCost(0.3, 0.1, 0.5, 3, 0.9)
    moved = Drift.between(sample(100.0), sample(80.0), 0.9)
    steady = Drift.between(sample(100.0), sample(100.2), 0.9)
    assert impossible_cost(positive, moved, True) is None
    assert "box's speed moved while it was measured (the twin -20.0%" in str(
        impossible_cost(negative, moved, True))
    assert "within the class's minutes" in str(impossible_cost(negative, steady, True))
    assert "no check after it" in str(impossible_cost(negative, None, False))


def test_a_significant_move_under_half_the_resolution_is_not_named():
    """Requests so alike that a 1.5% move is significant: below the notable move (half a 5%
    resolution) it is measured and kept, not named."""
    before, after = sample(100.0, spread=0.001), sample(98.5, spread=0.001)
    assert Drift.between(before, after, 0.9).seen  # significant
    quiet = Drift.between(before, after, 0.9, notable=0.025)
    assert quiet is not None and not quiet.seen and quiet.to_json()["seen"] is False
