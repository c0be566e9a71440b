"""The speculation plan's model (advisers/spec_plan.py): the draft cost in two parts and the
acceptance per position, fitted on two step counts and the twin, predict every other K."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

from pytest_specbound.advisers.spec_plan import (
    Acceptance,
    Confirmation,
    Measured,
    RoundModel,
    fit_acceptance,
    fit_cost,
    predict_level,
)

# a system to predict: verify over K + 1 tokens grows 1.5 ms a token above a 10 ms read, the
# engine adds 2 ms a round, drafting costs 0.5 ms a round plus 0.8 ms a forward, and position i
# is accepted with probability 0.9 x 0.8^(i - 1)
TRUTH = Acceptance(0.9, 0.8)


def roof(k: int) -> float:
    return 10.0 + 1.5 * k


def true_rate(k: int) -> float:
    round_ms = roof(k) + 2.0 + ((0.5 + 0.8 * k) if k else 0.0)
    return 1e3 * TRUTH.accept(k) / round_ms


def exact(k: int, spread: float = 0.0) -> Measured:
    rate = true_rate(k)
    return Measured(k, rate, (rate * (1 - spread), rate * (1 + spread)), TRUTH.accept(k),
                    (TRUTH.accept(k),) * 2)


def test_two_step_counts_and_the_twin_predict_every_other_k():
    plan = predict_level(1, exact(0), [exact(1), exact(3)], RoundModel(roof), range(1, 11))
    for p in plan.predictions:
        assert p.rate == pytest.approx(true_rate(p.steps), rel=1e-6), p
        assert p.speedup == pytest.approx(true_rate(p.steps) / true_rate(0), rel=1e-6)
    assert plan.cost.fixed_ms == pytest.approx(0.5) and plan.cost.per_unit_ms == pytest.approx(0.8)
    assert plan.acceptance.first == pytest.approx(0.9) and plan.acceptance.decay == pytest.approx(0.8)
    best = max(range(1, 11), key=true_rate)
    assert plan.recommended == best and 1 < best < 10


def test_the_intervals_carry_the_measurements_spread_and_hold_the_truth():
    plan = predict_level(1, exact(0, 0.03), [exact(1, 0.03), exact(3, 0.03)], RoundModel(roof),
                         range(1, 9))
    for p in plan.predictions:
        low, high = p.rate_bounds
        assert low < true_rate(p.steps) < high, p
        assert p.speedup_bounds[0] < p.speedup < p.speedup_bounds[1]
    # further from the measured step counts, the prediction is less sure
    width = {p.steps: (p.rate_bounds[1] - p.rate_bounds[0]) / p.rate for p in plan.predictions}
    assert width[8] > width[3]


def test_where_drafting_costs_more_than_it_gains_no_k_is_recommended():
    def slow(k: int) -> Measured:  # drafting costs 12 ms a forward
        rate = 1e3 * TRUTH.accept(k) / (roof(k) + 2.0 + (12.0 * k if k else 0.0))
        return Measured(k, rate, (rate, rate), TRUTH.accept(k), (TRUTH.accept(k),) * 2)

    plan = predict_level(4, slow(0), [slow(1), slow(2)], RoundModel(roof), range(1, 6))
    assert plan.recommended == 0 and plan.best.speedup < 1
    assert plan.to_json()["recommended_steps"] == 0


def test_acceptance_fitted_through_two_accept_lengths():
    fit = fit_acceptance([(2, TRUTH.accept(2)), (5, TRUTH.accept(5))])
    assert (fit.first, fit.decay) == (pytest.approx(0.9), pytest.approx(0.8))
    assert fit.accept(9) == pytest.approx(TRUTH.accept(9))
    # no decay measured (a drafter right every time): every position alike, capped at 1
    flat = fit_acceptance([(1, 1.7), (3, 3.1)])
    assert flat.decay == 1.0 and flat.accept(4) == pytest.approx(3.8)
    assert fit_acceptance([(1, 1.99), (2, 2.98)]).position(5) <= 1.0


def test_measured_positions_are_kept_and_extended_by_their_last_ratio():
    fit = fit_acceptance([(1, 1.9), (3, 2.5)], positions=(0.9, 0.6, 0.3))
    assert [fit.position(i) for i in (1, 2, 3)] == [0.9, 0.6, 0.3]
    assert fit.position(4) == pytest.approx(0.15) and fit.position(5) == pytest.approx(0.075)
    assert "measured per position 1-3" in fit.how


def test_a_negative_slope_is_not_physics_all_fixed():
    cost = fit_cost([(1, 3.0), (3, 2.0)])
    assert cost.per_unit_ms == 0 and cost.fixed_ms == pytest.approx(2.5)
    assert fit_cost([(1, 1.0), (3, 2.0)]).ms(5) == pytest.approx(3.0)


def test_lookup_drafters_pay_per_drafted_token_and_k_zero_is_the_twin():
    plan = predict_level(1, exact(0), [exact(1), exact(3)],
                         RoundModel(roof, unit="drafted token"), range(0, 5))
    zero = plan.at(0)
    assert zero is not None and zero.rate == pytest.approx(true_rate(0)) and zero.accept == 1.0
    assert plan.to_json()["draft_cost_ms"]["unit"] == "drafted token"


def test_a_confirmation_lands_inside_the_predicted_interval_or_says_not():
    plan = predict_level(1, exact(0, 0.02), [exact(1, 0.02), exact(3, 0.02)], RoundModel(roof),
                         range(1, 9))
    k = plan.recommended
    predicted = plan.at(k)
    assert predicted is not None
    assert Confirmation(exact(k, 0.02)).landed(predicted)
    assert not Confirmation(Measured(k, predicted.rate_bounds[1] * 1.2, (0, 0))).landed(predicted)


def test_the_table_says_how_the_twin_was_pooled_and_a_confirmation_that_ran_slower():
    """The plan's text names the twin's blocks (two pooled, or a third measured where they
    disagreed) and, where the recommended K measured outside its interval and under the twin,
    says so: a plan may miss, not silently."""
    from pytest_specbound.advisers.spec_sweep import SpecPlan
    from pytest_specbound.report.spec_plan import render_plan

    level = predict_level(1, exact(0, 0.02), [exact(1, 0.02), exact(3, 0.02)], RoundModel(roof),
                          range(1, 9))
    k = level.recommended
    base = level.base.rate
    plan = SpecPlan("b.toml", "chat", "cpu", (1, 3), tuple(range(1, 9)), [
        replace(level, base_drift=0.04, base_blocks=2,
                confirmation=Confirmation(exact(k, 0.02), true_rate(k) / base)),
        replace(level, concurrency=2, base_drift=0.67, base_blocks=3,
                confirmation=Confirmation(Measured(k, 0.85 * base, (0.8 * base, 0.9 * base)),
                                          0.85))])
    text = render_plan(plan)
    assert "(its two blocks +4% apart, pooled)" in text
    assert "(its first two blocks +67% apart: measured a third time, the median block's)" in text
    first, second = [line for line in text.splitlines() if line.startswith("confirmed:")]
    assert "inside the predicted" in first and "slower" not in first
    assert "OUTSIDE the predicted" in second and second.endswith(
        "it ran slower than without speculation; measure again before deploying it")
    assert [lv["base_blocks"] for lv in plan.to_json()["levels"]] == [2, 3]


def test_one_measured_step_count_is_refused():
    with pytest.raises(ValueError, match="two distinct measured step counts"):
        predict_level(1, exact(0), [exact(2), exact(2)], RoundModel(roof), range(1, 4))
    assert math.isfinite(true_rate(0))


@pytest.mark.parametrize(("args", "needle"), [
    (["--class", "nope"], "--class: no class 'nope' in"),
    (["--measure", "3"], "two distinct step counts such as 1,3, got '3'"),
    (["--steps", "0-4"], "step counts from 1 to 64, got '0-4'"),
])
def test_the_plan_command_says_what_is_wrong_in_one_line(tmp_path, capsys, args, needle):
    from pytest_specbound.cli import main

    budget = tmp_path / "b.toml"
    budget.write_text('[model]\nname = "llama-3.1-8b"\n[speculative]\nmethod = "eagle3"\n'
                      'steps = 3\n[server]\nurl = "http://127.0.0.1:9"\n[classes.chat]\n'
                      '[classes.coding]\n')
    with pytest.raises(SystemExit) if args[0] != "--class" else _nothing():
        code = main(["plan-spec", str(budget), "--hw", "h100", *args])
        assert code == 2
    err = capsys.readouterr().err
    # one line (argparse's usage above its own)
    assert needle in err.strip().splitlines()[-1] and "Traceback" not in err, err


def test_a_server_attached_by_url_cannot_be_planned(tmp_path, capsys):
    from pytest_specbound.cli import main

    budget = tmp_path / "b.toml"
    budget.write_text('[model]\nname = "llama-3.1-8b"\n[speculative]\nmethod = "eagle3"\n'
                      'steps = 3\n[server]\nurl = "http://127.0.0.1:9"\n[classes.chat]\n')
    assert main(["plan-spec", str(budget), "--hw", "h100", "--log-dir",
                 str(tmp_path / "logs")]) == 2
    err = capsys.readouterr().err
    assert "plan-spec launches the server at each step count: give a launch command" in err


class _nothing:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> bool:
        return False


def test_the_twins_two_blocks_are_pooled_and_their_drift_widens_the_interval():
    from pytest_specbound.advisers.spec_sweep import pooled

    before = Measured(0, 100.0, (95.0, 105.0))
    after = Measured(0, 80.0, (76.0, 84.0))
    both, drift = pooled(before, after)
    assert both.rate == 90.0 and both.rate_bounds == (76.0, 105.0)
    assert drift == pytest.approx(-0.2)


def _twin_block(rate: float, requests: int = 4):
    """A twin's block: ``requests`` timed at about ``rate`` decode tok/s."""
    from pytest_specbound.gate.verdicts.result import ClassResult
    from pytest_specbound.serving.records import RequestRecord

    spread = (0.98, 1.02, 0.99, 1.01)
    records = tuple(RequestRecord(completion_tokens=65, decode_s=64 / (rate * spread[i % 4]))
                    for i in range(requests))
    return ClassResult("b.toml", "c", "cpu", "pass", decode_tok_s=rate, requests=records,
                       samples=requests)


def test_the_twins_three_blocks_pool_about_their_median():
    from pytest_specbound.advisers.spec_sweep import pooled

    blocks = [Measured(0, r, (r - 5, r + 5)) for r in (100.0, 167.0, 160.0)]
    both, drift = pooled(*blocks)
    assert both.rate == 160.0 and both.rate_bounds == (95.0, 172.0)
    assert drift == pytest.approx(0.67)


@pytest.mark.parametrize(("first", "later", "blocks", "rate"), [
    (100.0, 110.0, 2, 105.0),  # 10% apart: pooled, nothing measured again
    (100.0, 80.0, 2, 90.0),  # 20% under: still within TWIN_DISAGREE
    (100.0, 167.0, 3, 160.0),  # 67% apart (seen on a 2-core box): a third block, the median
    (167.0, 100.0, 3, 160.0),  # the same the other way about
])
def test_a_twin_whose_two_blocks_disagree_is_measured_a_third_time(first, later, blocks, rate):
    """The plan's twin is every speedup's denominator: two blocks further apart than
    TWIN_DISAGREE say the box moved one of them, so a third is measured and the median block's
    rate taken (once, two blocks 67% apart put K=2 at 1.14x; measured, it ran 0.85x)."""
    from pytest_specbound.advisers.spec_sweep import measured_from, settled_twin

    asked: list[int] = []

    def third():
        asked.append(1)
        return _twin_block(160.0)

    twin, drift, n = settled_twin(measured_from(_twin_block(first), 0), _twin_block(later),
                                  third)
    assert (n, len(asked)) == (blocks, blocks - 2)
    assert twin.rate == pytest.approx(rate) and drift == pytest.approx(later / first - 1)
    assert twin.rate_bounds[0] < min(first, later) and twin.rate_bounds[1] > max(first, later)


def test_a_twin_measured_once_or_whose_third_block_failed_keeps_what_it_has():
    from pytest_specbound.advisers.spec_sweep import measured_from, settled_twin

    first = measured_from(_twin_block(100.0), 0)
    assert settled_twin(first, None, lambda: pytest.fail("no third block")) == (first, None, 1)
    twin, drift, n = settled_twin(first, _twin_block(200.0), lambda: None)
    assert (n, twin.rate, drift) == (2, pytest.approx(150.0), pytest.approx(1.0))


def test_the_default_step_counts_sit_a_quarter_and_three_quarters_into_the_range():
    from pytest_specbound.cli.plan_spec import apart

    assert apart(tuple(range(1, 9))) == (2, 6) and apart(tuple(range(1, 12))) == (3, 8)
    assert apart((1, 2)) == (1, 2) and apart((4,)) == (4, 5)


def test_the_sweeps_best_and_the_plans_k_side_by_side_decide_the_five_percent():
    """A plan's K against a sweep's best: the same K agrees; a different K agrees when its A B B
    A blocks pool within 5% of the best's, whatever the sweep's single points said (a sweep's
    best on a noisy box may be its luckiest point), and not when they pool further under."""
    from pytest_specbound.advisers.against_sweep import AgainstSweep, HeadToHead

    lucky = AgainstSweep(1, sweep_k=3, sweep_speedup=1.60, plan_k=5, plan_speedup=1.30)
    assert not lucky.agrees and lucky.ratio < 0.95  # the sweep's points alone
    close = HeadToHead(1, 5, 3, plan_rates=(100.0, 90.0), sweep_rates=(98.0, 96.0))
    assert math.isclose(close.ratio, 190 / 194)
    assert close.ratio_bounds == (90 / 96, 100 / 98)
    assert replace(lucky, referee=close).agrees
    worse = HeadToHead(1, 5, 3, plan_rates=(88.0, 86.0), sweep_rates=(98.0, 96.0))
    assert not replace(lucky, referee=worse).agrees
    assert AgainstSweep(1, 0, 1.0, 0, 1.0).agrees
    # a second round of blocks only where the box moved the verdict: the pairs on both sides
    # of the 5% and the pooled ratio under it
    assert not close.undecided and not worse.undecided
    moved = HeadToHead(1, 5, 3, plan_rates=(100.0, 80.0), sweep_rates=(98.0, 96.0))
    assert moved.pairs == (100 / 98, 80 / 96) and moved.ratio < 0.95 and moved.undecided


def test_a_lookup_drafter_that_finds_no_match_keeps_its_idle_share_at_every_k():
    """vLLM's n-gram drafts only where the text repeats: its histogram counts the drafting
    rounds, and the forwards beyond them drafted nothing. A synthetic text: 30% of its tokens
    where no n-gram matches, elsewhere position i accepted 0.9 x 0.8^(i-1) per drafting round.
    Measured at K=8 (histogram and accept length), the accept length at K=1 and K=2 comes out
    as that text gives it; read as unconditional positions (the rounds mixed) it came out low."""
    from pytest_specbound.advisers.spec_sweep import measured_from
    from pytest_specbound.gate.verdicts.result import ClassResult
    from pytest_specbound.serving.records import RequestRecord

    idle = 0.3

    def text_accept(k: int) -> float:
        return 1 / (idle + (1 - idle) / TRUTH.accept(k))

    rounds = 1000  # drafting rounds at K=8; its histogram by accepted count (a chain)
    at_least = [1.0] + [TRUTH.position(i) for i in range(1, 9)] + [0.0]  # P(accepted >= j)
    hist = [round(rounds * (at_least[j] - at_least[j + 1])) for j in range(9)]
    accepted = sum(j * n for j, n in enumerate(hist))
    drafting_tokens = sum(hist) + accepted
    decode = round(drafting_tokens / (1 - idle))  # the idle forwards emit the rest, one each
    forwards = decode - drafting_tokens + sum(hist)
    record = RequestRecord(completion_tokens=decode + 1, decode_s=1.0,
                           accept_length=decode / forwards, accept_source="server",
                           server={"metrics": {"speculative_decoding": {
                               "acceptance_histogram": hist, "num_spec_steps": sum(hist),
                               "num_accepted_draft_tokens": accepted}}})
    result = ClassResult("b.toml", "c", "cpu", "pass", accept_length=decode / forwards,
                         decode_tok_s=100.0, requests=(record,), samples=1)
    at8 = measured_from(result, 8)
    assert at8.idle == pytest.approx(idle, abs=0.002)
    assert at8.positions[0] == pytest.approx(0.9, abs=0.002)
    fit = fit_acceptance([(2, text_accept(2)), (8, at8.accept)], at8.positions, at8.idle)
    assert fit.accept(8) == pytest.approx(at8.accept, rel=0.002)  # exact where measured
    for k in (1, 2, 4):
        assert fit.accept(k) == pytest.approx(text_accept(k), rel=0.01), k
    mixed = fit_acceptance([], [p * (at8.accept - 1) / sum(at8.positions)
                                for p in at8.positions])
    assert mixed.accept(1) < 0.93 * text_accept(1)
    assert "30% of tokens from rounds that drafted nothing" in fit.how
