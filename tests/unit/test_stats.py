import random

import pytest

from pytest_specbound.measure.stats import bounds, ratio_interval, t_quantile
from pytest_specbound.physics.hardware import parse_hardware
from pytest_specbound.physics.models import load_model
from pytest_specbound.physics.roofline import compute_roofline
from pytest_specbound.physics.speculative import parse_speculation
from pytest_specbound.serving.records import RequestRecord


@pytest.fixture(scope="module")
def roof():
    return compute_roofline(parse_hardware("a6000"), load_model("llama-3.1-8b"),
                            parse_speculation("eagle3:3"))


def test_t_quantile_matches_tables():
    assert t_quantile(0.975, 4) == pytest.approx(2.776, abs=0.01)
    assert t_quantile(0.975, 10) == pytest.approx(2.228, abs=0.005)
    assert t_quantile(0.995, 20) == pytest.approx(2.845, abs=0.005)


def test_ratio_interval_covers_weighted_ratio():
    ys, xs = [10, 20, 30, 40], [1.0, 2.1, 2.9, 4.2]
    iv = ratio_interval(ys, xs, 0.95)
    assert iv.estimate == pytest.approx(100 / 10.2)
    assert iv.low < iv.estimate < iv.high


def test_ratio_interval_coverage_by_simulation():
    rng = random.Random(1)
    hits = 0
    for _ in range(400):
        xs = [rng.uniform(1, 5) for _ in range(12)]
        ys = [x * 50 * rng.lognormvariate(0, 0.1) for x in xs]
        iv = ratio_interval(ys, xs, 0.9)
        hits += iv.low <= 50 * 1.005 and iv.high >= 50 * 1.005  # lognormal mean shift ~0.5%
    assert 0.84 <= hits / 400 <= 0.96


def test_efficiency_interval_is_rate_times_round_without_speculation():
    recs = [RequestRecord(completion_tokens=101, decode_s=1.0 + 0.01 * i) for i in range(6)]
    b = bounds(recs, 10.0, 0.95)
    assert b["efficiency"][0] == pytest.approx(b["decode_tok_s"][0] * 0.01)


# Published two-sided critical values (Student's t table, e.g. NIST/SEMATECH e-Handbook 1.3.6.7.2,
# to 6 decimals): (df, upper-tail probability 1 - p) -> t.
T_TABLE = {
    (1, 0.025): 12.706205, (1, 0.005): 63.656741, (1, 0.0005): 636.619249,
    (2, 0.025): 4.302653, (2, 0.005): 9.924843, (2, 0.0005): 31.599055,
    (3, 0.025): 3.182446, (3, 0.005): 5.840909, (3, 0.0005): 12.923979,
    (4, 0.025): 2.776445, (4, 0.005): 4.604095,
    (5, 0.025): 2.570582, (5, 0.005): 4.032143, (5, 0.0005): 6.868827,
    (10, 0.025): 2.228139, (10, 0.005): 3.169273, (10, 0.0005): 4.586894,
    (20, 0.025): 2.085963, (20, 0.005): 2.845340, (20, 0.0005): 3.849516,
    (30, 0.025): 2.042272, (30, 0.005): 2.749996, (30, 0.0005): 3.645959,
}


@pytest.mark.parametrize(("df", "tail"), sorted(T_TABLE))
def test_t_quantile_matches_published_tables(df, tail):
    assert t_quantile(1 - tail, df) == pytest.approx(T_TABLE[(df, tail)], abs=1e-4)
    assert t_quantile(tail, df) == pytest.approx(-T_TABLE[(df, tail)], abs=1e-4)


@pytest.mark.parametrize("alpha", [0.05, 0.025, 0.0125, 0.01])
@pytest.mark.parametrize("df", [2, 3, 5, 8, 13, 19])
def test_t_quantile_inverts_the_exact_cdf(alpha, df):
    """At the one-sided levels the intervals use (alpha split over a class's thresholds)."""
    from pytest_specbound.measure.stats import t_two_sided_mass

    p = 1 - alpha
    q = t_quantile(p, df)
    assert (1 + t_two_sided_mass(q, df)) / 2 == pytest.approx(p, abs=1e-12)
