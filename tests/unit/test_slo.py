"""SLOs: ``max_tpot_ms`` at a percentile and ``min_goodput`` as sequential proportion tests
(error rates simulated), the budget keys, and the verdict texts."""

from __future__ import annotations

import math
import random

import pytest

from pytest_specbound.errors import ConfigError
from pytest_specbound.gate.judging.judge import judge
from pytest_specbound.gate.judging.rule import decisions
from pytest_specbound.gate.schema.budget import load_budget
from pytest_specbound.gate.schema.class_budget import ClassBudget
from pytest_specbound.measure.measurement import Measurement
from pytest_specbound.measure.proportion import alternative, decide_share, percentile, wilson
from pytest_specbound.measure.sequential import Side, Threshold
from pytest_specbound.physics.hardware import parse_hardware
from pytest_specbound.physics.models import load_model
from pytest_specbound.physics.roofline import compute_roofline
from pytest_specbound.physics.speculative import parse_speculation
from pytest_specbound.serving.records import RequestRecord


def run_share(rng: random.Random, true_share: float, p0: float, alpha: float = 0.0125,
              resolution: float = 0.05, budget: int = 2000) -> Side:
    met: list[bool] = []
    for _ in range(budget):
        met.append(rng.random() < true_share)
        if len(met) >= 4 and len(met) % 10 == 0:
            side = decide_share(met, p0, alpha, resolution).side
            if side is not Side.UNSURE:
                return side
    return Side.UNSURE


@pytest.mark.parametrize("p0", [0.99, 0.95, 0.8])
def test_the_share_test_keeps_its_false_failure_and_miss_rates(p0):
    rng = random.Random(int(p0 * 100))
    runs = 300
    at_threshold = [run_share(rng, p0, p0) for _ in range(runs)]
    assert at_threshold.count(Side.BAD) / runs <= 0.0125 + 0.015
    beyond = alternative(p0, 0.05)
    below = [run_share(rng, beyond, p0) for _ in range(runs)]
    assert below.count(Side.OK) / runs <= 0.05 + 0.02


def test_alternatives_scale_the_share_that_misses():
    assert alternative(0.99, 0.05) == pytest.approx(0.98)  # p99: 1% missing against 2%
    assert alternative(0.95, 0.05) == pytest.approx(0.90)
    lo, hi = wilson(95, 100, 0.95)
    assert lo < 0.95 < hi and percentile([3.0, 1.0, 2.0, 4.0], 0.5) == 2.0


@pytest.fixture(scope="module")
def seed():
    return compute_roofline(parse_hardware("a6000x2"), load_model("qwen3.6-27b"),
                            parse_speculation("mtp:3"))


def measured(tpots_ms: list[float], ttft: float = 0.05) -> Measurement:
    return Measurement("sglang", [RequestRecord(completion_tokens=101, ttft_s=ttft,
                                                decode_s=t * 100 / 1e3, accept_length=3.0,
                                                accept_source="server") for t in tpots_ms])


def test_tpot_and_goodput_pass_and_fail_as_they_should(seed):
    cls = ClassBudget("chat", "chat", 100, tpot_percentile=90,
                      limits={"max_tpot_ms": 25.0, "max_ttft_ms": 100.0, "min_goodput": 0.9})
    good = measured([18.0 + (i % 5) for i in range(40)])
    found = decisions(cls, good, seed, 0.95, 0.05)
    assert found[Threshold.TPOT_MS].side is Side.OK and found[Threshold.GOODPUT].side is Side.OK
    assert judge(cls, good, seed, found).status == "pass"
    slow = measured([18.0] * 20 + [40.0] * 20)  # half the requests over 25 ms
    found = decisions(cls, slow, seed, 0.95, 0.05)
    v = judge(cls, slow, seed, found)
    assert v.status == "fail" and v.diagnosis == "system"
    assert {"tpot_above_max", "goodput_below_min"} <= set(v.reasons)
    assert any(x.startswith("TPOT p90 40.00 ms > max_tpot_ms 25 (only 50.0% of requests") for x in
               v.lines), v.lines
    assert any(x.startswith("goodput 50.0% < min_goodput 0.9") for x in v.lines)


def test_goodput_needs_an_slo_and_the_keys_are_checked(tmp_path):
    path = tmp_path / "b.toml"
    base = '[model]\nname = "llama-3.1-8b"\n[server]\nurl = "http://h:1"\n[classes.chat]\n'
    path.write_text(base + "min_goodput = 0.9\n")
    with pytest.raises(ConfigError, match=r"b\.toml:6: classes\.chat\.min_goodput: the share "
                                          r"of requests meeting every SLO needs an SLO"):
        load_budget(path)
    path.write_text(base + "max_tpot_ms = 20\ntpot_percentile = 101\n")
    with pytest.raises(ConfigError, match=r"classes\.chat\.tpot_percentile"):
        load_budget(path)
    path.write_text(base + "max_tpot_ms = 20\nmin_goodput = 0.9\nconcurrency = [1, 4]\n"
                    "[classes.chat.c4]\nmin_goodput = 0.8\n")
    c = load_budget(path).classes["chat"]
    assert (c.limits.get("max_tpot_ms"), c.tpot_percentile, c.limits.get("min_goodput")) == (20, 99.0, 0.9)
    assert c.at(4).limits.get("min_goodput") == 0.8  # a level table may move it


def run_tpot(rng: random.Random, p_quantile: float, limit: float, sd: float = 0.3,
             q: float = 0.99, budget: int = 64) -> tuple[Side, int]:
    """Log-normal TPOTs whose ``q`` quantile is ``p_quantile``, the test read after every 4
    (the bounds move only at their looks, 4, 8, 16, ...; the share test holds at any look)."""
    from statistics import NormalDist

    from pytest_specbound.measure.proportion import decide_tpot

    mu = math.log(p_quantile) - NormalDist().inv_cdf(q) * sd
    values: list[float] = []
    for _ in range(budget):
        values.append(math.exp(rng.gauss(mu, sd)))
        if len(values) % 4 == 0:
            side = decide_tpot(values, limit, q, 0.0125, 0.05).side
            if side is not Side.UNSURE:
                return side, len(values)
    return Side.UNSURE, budget


def test_a_p99_far_from_its_limit_is_decided_in_a_few_requests():
    """The share test alone needs some 60 requests to pass a p99 limit however far under it
    they are (seen on a real vLLM: 16 requests at 1-2.5 ms against 50, undecided); the
    percentile's log-normal bounds decide in 4 to 16."""
    rng = random.Random(5)
    far = [run_tpot(rng, 5.0, 50.0) for _ in range(50)]
    assert all(side is Side.OK for side, _ in far) and max(n for _, n in far) <= 16
    over = [run_tpot(rng, 100.0, 50.0) for _ in range(50)]
    assert all(side is Side.BAD for side, _ in over) and max(n for _, n in over) <= 16


@pytest.mark.parametrize("sd", [0.1, 0.3, 0.6])
def test_the_percentile_test_keeps_its_error_rates_over_every_look(sd):
    rng = random.Random(int(sd * 10))
    runs = 200
    at_limit = [run_tpot(rng, 50.0, 50.0, sd)[0] for _ in range(runs)]
    assert at_limit.count(Side.BAD) / runs <= 0.0125 + 0.01
    beyond = [run_tpot(rng, 50.0 / 0.95, 50.0, sd)[0] for _ in range(runs)]
    assert beyond.count(Side.OK) / runs <= 0.05 + 0.02


def test_the_quantile_bounds_match_the_exact_tolerance_factors():
    """Natrella's approximation against the exact one-sided factors (noncentral t; tabled in
    NIST's e-Handbook 7.2.6.3) for the 0.99 quantile at 95%: n 10 -> 3.981, n 20 -> 3.295."""
    from pytest_specbound.measure.proportion import quantile_bounds

    for n, exact in ((10, 3.981), (20, 3.295)):
        logs = [(-1.0) ** i for i in range(n)]  # mean 0; sd from the sample
        sd = math.sqrt(sum(x * x for x in logs) / (n - 1))
        bounds = quantile_bounds([math.exp(x) for x in logs], 0.99, 0.95)
        assert bounds is not None
        assert math.log(bounds[1]) / sd == pytest.approx(exact, rel=0.012)


def test_goodput_of_a_request_timed_on_the_servers_clock_uses_the_servers_ttft():
    """The client could not time it (one read brought every token): its TTFT is the whole
    request, and the server's own (vLLM's per-request metrics, llama-server's prompt_ms) is
    the one that counts; a request the client timed keeps the client's."""
    from pytest_specbound.gate.verdicts.thresholds import met

    server_timed = RequestRecord(completion_tokens=41, ttft_s=2.0, decode_s=0.4, clock="server",
                                 server_ttft_s=0.08, client_untimed="one read")
    client_timed = RequestRecord(completion_tokens=41, ttft_s=0.9, decode_s=0.4,
                                 server_ttft_s=0.08)
    unknown = RequestRecord(completion_tokens=41, ttft_s=2.0, decode_s=0.4, clock="server")
    m = Measurement("vllm", [server_timed, client_timed, unknown])
    assert met({"max_ttft_ms": 500.0}, m) == [True, False, False]


def test_the_servers_own_ttft_is_read_per_family():
    from pytest_specbound.serving.backends.llamacpp import LlamaCpp
    from pytest_specbound.serving.backends.sglang import SGLang
    from pytest_specbound.serving.backends.vllm import VLLM

    base = RequestRecord(completion_tokens=11)
    vllm = VLLM().server_fields([(0.1, {"metrics": {"time_to_first_token_ms": 30.0,
                                                    "queue_time_ms": 5.0,
                                                    "generation_time_ms": 100.0}})], base)
    assert vllm.server_ttft_s == pytest.approx(0.035)
    llama = LlamaCpp().server_fields([(0.1, {"timings": {"prompt_ms": 12.5, "predicted_n": 11,
                                                         "predicted_ms": 90.0}})], base)
    assert llama.server_ttft_s == pytest.approx(0.0125)
    sglang = SGLang().server_fields([(0.1, {"meta_info": {"first_token_latency": 0.02,
                                                          "completion_tokens": 11}})], base)
    assert sglang.server_ttft_s == pytest.approx(0.02)
