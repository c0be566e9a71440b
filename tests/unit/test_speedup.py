"""Speculation against none: the speedup's interval, ``min_speedup``'s sequential test and its
error rates (simulated), the measured cost per draft forward, and how a failure reads."""

from __future__ import annotations

import math
import random

import pytest

from pytest_specbound.gate.judging.judge import Judging, judge
from pytest_specbound.gate.judging.rule import decisions
from pytest_specbound.gate.references.against_twin import AgainstTwin
from pytest_specbound.gate.schema.class_budget import ClassBudget
from pytest_specbound.gate.verdicts.result import ClassResult
from pytest_specbound.gate.verdicts.verdict import Verdict
from pytest_specbound.measure.measurement import Measurement
from pytest_specbound.measure.sequential import Side, Threshold
from pytest_specbound.measure.speedup import (
    Sample,
    draft_step_cost,
    precise_enough,
    speedup,
    speedup_decision,
    welch,
)
from pytest_specbound.physics.hardware import parse_hardware
from pytest_specbound.physics.models import load_model
from pytest_specbound.physics.roofline import compute_roofline
from pytest_specbound.physics.speculative import parse_speculation
from pytest_specbound.report.table import crossover, speedup_text, terminal
from pytest_specbound.serving.records import RequestRecord


def base_of(rates: list[float], floor_ms: float = 10.0) -> Sample:
    return Sample(tuple(rates), tuple(1e3 / r for r in rates), floor_ms, 1e3 / floor_ms)


def lognormal(rng: random.Random, mean: float, sd: float, n: int) -> list[float]:
    return [mean * math.exp(rng.gauss(0, sd)) for _ in range(n)]


def test_speedup_is_the_ratio_of_geometric_means_with_welch_interval():
    base = base_of([100.0, 110.0, 90.0, 105.0])
    spec = [150.0, 160.0, 140.0, 155.0, 145.0]
    s = speedup(spec, base, 0.95)
    g = lambda xs: math.exp(sum(map(math.log, xs)) / len(xs))  # noqa: E731
    assert s is not None and s.estimate == pytest.approx(g(spec) / g(base.rates))
    assert s.low < s.estimate < s.high
    assert speedup([150.0], base, 0.95) is None  # one request: no interval


def test_welch_interval_covers_at_its_level():
    """Unequal variances and sizes: the interval's coverage is its level (within 2 points)."""
    rng = random.Random(7)
    hits = 0
    for _ in range(4000):
        a = [rng.gauss(1.0, 0.3) for _ in range(6)]
        b = [rng.gauss(0.0, 0.05) for _ in range(15)]
        iv = welch(a, b, 0.9)
        assert iv is not None
        hits += iv.low <= 1.0 <= iv.high
    assert 0.88 <= hits / 4000 <= 0.92


def run_sequential(rng: random.Random, true_speedup: float, limit: float, alpha: float,
                   resolution: float, sd: float = 0.08) -> Side:
    base = base_of(lognormal(rng, 100.0, sd, 12))
    rates: list[float] = []
    for _ in range(64):
        rates.append(100.0 * true_speedup * math.exp(rng.gauss(0, sd)))
        if len(rates) >= 4:
            d = speedup_decision(rates, base, limit, alpha, resolution)
            if d.side is not Side.UNSURE:
                return d.side
    return Side.UNSURE


def test_min_speedup_false_failure_rate_at_the_threshold_is_within_alpha():
    rng = random.Random(11)
    runs = 400
    bad = sum(run_sequential(rng, 1.3, 1.3, 0.05, 0.05) is Side.BAD for _ in range(runs))
    assert bad / runs <= 0.05 + 0.02  # stated: alpha (0.05), plus simulation noise


def test_min_speedup_miss_rate_a_resolution_below_is_within_beta():
    rng = random.Random(12)
    runs = 400
    passed = sum(run_sequential(rng, 1.3 * 0.95, 1.3, 0.05, 0.05) is Side.OK
                 for _ in range(runs))
    assert passed / runs <= 0.05 + 0.02


def test_min_speedup_decides_clear_cases_quickly():
    rng = random.Random(3)
    assert run_sequential(rng, 2.0, 1.2, 0.05, 0.05) is Side.OK
    assert run_sequential(rng, 0.9, 1.2, 0.05, 0.05) is Side.BAD


def test_the_base_stops_once_its_rate_is_precise():
    assert not precise_enough([100.0, 130.0, 80.0], 0.95, 0.025)
    assert precise_enough([100.0, 100.5, 99.5, 100.2, 99.8], 0.95, 0.025)
    assert not precise_enough([100.0], 0.95, 0.5)


def test_draft_step_cost_recovers_the_engine_cost_per_forward():
    """Base rounds sit 1 ms above their floor, speculative ones 1 ms + 3 x 0.7 ms above theirs:
    the cost per forward is 0.7 ms, whatever the floors."""
    rng = random.Random(5)
    base_rounds = [8.0 + 1.0 + rng.gauss(0, 0.05) for _ in range(20)]
    base = Sample(tuple(1e3 / r for r in base_rounds), tuple(base_rounds), 8.0, 125.0)
    spec_rounds = [12.0 + 1.0 + 3 * 0.7 + rng.gauss(0, 0.05) for _ in range(20)]
    cost = draft_step_cost(spec_rounds, 12.0, base, 3, 0.95)
    assert cost is not None and cost.ms == pytest.approx(0.7, abs=0.03)
    assert cost.low < 0.7 < cost.high
    assert draft_step_cost(spec_rounds, 12.0, base, 0, 0.95) is None  # n-gram: no forwards


@pytest.fixture(scope="module")
def seed():
    return compute_roofline(parse_hardware("a6000x2"), load_model("qwen3.6-27b"),
                            parse_speculation("mtp:3"))


def measured(rates: list[float], accept: float = 2.1, concurrency: int = 1) -> Measurement:
    tokens = 256
    return Measurement("sglang", [RequestRecord(completion_tokens=tokens + 1, ttft_s=0.05,
                                                decode_s=tokens / r, accept_length=accept,
                                                accept_source="server") for r in rates],
                       concurrency=concurrency)


def test_speculation_that_does_not_pay_is_its_own_diagnosis(seed):
    cls = ClassBudget("chat", "chat", 256, limits={"accept": (1.8, 2.6), "min_speedup": 1.2})
    rng = random.Random(2)
    base = base_of(lognormal(rng, 50.0, 0.02, 12))
    m = measured(lognormal(rng, 48.5, 0.02, 12), concurrency=8)
    found = decisions(cls, m, seed, 0.95, 0.05, comparisons=(AgainstTwin(base),))
    assert found[Threshold.SPEEDUP].side is Side.BAD
    v = judge(cls, m, seed, found, how=Judging((AgainstTwin(base),)))
    assert v.status == "fail" and v.diagnosis == "speculation"
    assert "speedup_below_min" in v.reasons
    line = next(x for x in v.lines if x.startswith("speculation does not pay at c8: 0.9"))
    assert "< min_speedup 1.2x; accept 2.10 in its band [1.8, 2.6]" in line


def test_min_speedup_without_a_base_sets_no_test(seed):
    cls = ClassBudget("chat", "chat", 256, limits={"min_speedup": 1.2})
    assert decisions(cls, measured([50.0] * 6), seed, 0.95, 0.05) == {}


def result(level: int, s: float | None) -> ClassResult:
    return ClassResult("b.toml", "chat", "h100", Verdict("pass"), concurrency=level,
                       level_ids=True, speedup=s,
                       speedup_bounds=(s - 0.1, s + 0.1) if s else None,
                       base={"decode_tok_s": 50.0}, limits={"min_speedup": 1.1})


def test_the_table_shows_the_speedup_and_where_it_crosses_one():
    rs = [result(1, 1.6), result(4, 1.2), result(16, 0.9)]
    assert speedup_text(rs[0]) == "1.60x [1.50, 1.70] >= 1.1"
    assert crossover(rs) == "speculation stops paying between c4 (1.20x) and c16 (0.90x)"
    text = terminal(rs)
    assert "speedup [interval]" in text.splitlines()[0]
    assert "b.toml::chat without speculation: c1 50.0 tok/s" in text
    assert crossover([result(1, 0.8)]) == "speculation does not pay at any measured level"


def test_speedup_fields_survive_the_json_round_trip():
    r = result(4, 1.25)
    back = ClassResult.from_json(r.to_json())
    assert (back.speedup, back.speedup_bounds, back.base_decode_tok_s, back.limit("min_speedup")) == \
        (1.25, (1.15, 1.35), 50.0, 1.1)


def test_calibrate_proposes_the_lowest_levels_draft_cost_with_its_origin():
    from pytest_specbound.advisers.calibrate import apply, draft_cost_proposal, propose, roofline_scale
    from pytest_specbound.gate.verdicts.result import RooflineFigures

    roof = RooflineFigures(round_ms=10.0, components_ms={}, ceiling_tok_s=400.0, max_accept=4,
                           bound="memory", speculative="draft:3", context=500, batch=1,
                           draft_forwards=3)
    rs = [ClassResult("b.toml", "chat", "h100", Verdict("pass"), concurrency=c, roofline=roof,
                      draft_step_ms={"ms": ms, "low": ms - 0.1, "high": ms + 0.1},
                      bounds={"efficiency": (0.8, 0.9)}, resolution=0.05)
          for c, ms in ((4, 0.9), (1, 0.5))]
    ms, origin = draft_cost_proposal(rs, "h100-sxm", "sglang", "2026-12-05")
    assert ms == 0.5 and origin.startswith("measured on h100-sxm with sglang, 2026-12-05, at "
                                           "concurrency 1: 0.400-0.600 ms")
    assert roofline_scale(rs[1], 0.5) == pytest.approx((10.0 + 1.5) / 10.0)
    # the floor is proposed against the roofline that includes the cost
    assert propose(rs[1], 0.5)["min_efficiency"] == pytest.approx(
        math.floor(0.8 * 1.15 * 0.95 * 100) / 100)
    text = apply("[server]\nurl = 'x'\n\n[classes.chat]\n", "roofline", {"draft_step_ms": ms},
                 after="server", comments={"draft_step_ms": origin})
    assert f"[roofline]\ndraft_step_ms = 0.50  # {origin}\n" in text
    assert draft_cost_proposal([result(1, 1.2)], "h100", "auto", "d") is None


def test_the_plot_marks_where_the_speedup_crosses_one():
    from pytest_specbound.report.plot import crossing_level

    assert crossing_level([(1, 1.6), (4, 1.2), (16, 0.8)]) == pytest.approx(8.0)
    assert crossing_level([(1, 1.6), (4, 1.2)]) is None
    assert crossing_level([(2, 0.9), (8, 1.1)]) == pytest.approx(4.0)
