"""Verdict texts and diagnoses, on hand-made measurements (pure: no server)."""

from dataclasses import replace

import pytest

from pytest_specbound.gate.judging.judge import Judging, judge
from pytest_specbound.gate.schema.class_budget import ClassBudget
from pytest_specbound.measure.measurement import Measurement
from pytest_specbound.measure.sequential import Decision
from pytest_specbound.physics.hardware import parse_hardware
from pytest_specbound.physics.models import load_model
from pytest_specbound.physics.roofline import compute_roofline
from pytest_specbound.physics.speculative import parse_speculation
from pytest_specbound.serving.records import RequestRecord


@pytest.fixture(scope="module")
def seed():
    return compute_roofline(parse_hardware("a6000x2"), load_model("qwen3.6-27b"),
                            parse_speculation("mtp:3"))


def measured(tok_s, accept, n=8, source="server", ttft=0.05):
    tokens = 256
    return Measurement("sglang", [RequestRecord(completion_tokens=tokens + 1, ttft_s=ttft,
                                                decode_s=tokens / tok_s, accept_length=accept,
                                                accept_source=source) for _ in range(n)])


CODING = ClassBudget("coding", "coding", 256, limits={"accept": (2.8, 3.4), "min_efficiency": 0.70})


def test_seed_measurement_passes(seed):
    v = judge(CODING, measured(55, 3.08), seed)
    assert v.status == "pass" and v.diagnosis == "none"
    assert v.efficiency == pytest.approx(55 / seed.tok_s(3.08))
    assert v.floor_tok_s == pytest.approx(0.7 * seed.tok_s(3.08))


def test_system_slowdown_text(seed):
    v = judge(CODING, measured(48.1, 3.08), seed)
    assert v.status == "fail" and v.diagnosis == "system"
    assert v.lines[0] == "decode 48.1 tok/s < floor 50.9 tok/s (0.70 x roofline 72.8 at accept 3.08)"
    assert v.lines[1] == ("per round 64.0 ms vs roofline 42.3 ms: the system slowed down; "
                          "accept 3.08 is inside [2.8, 3.4]")
    assert v.lines[-1] == ("roofline: weights 35.2 | kv 0.0 | state 0.1 | allreduce 1.0 | "
                           "draft 5.5 | sched 0.5 ms")


def test_drafter_regression_text(seed):
    v = judge(CODING, measured(45, 2.5), seed)
    assert v.status == "fail" and v.diagnosis == "drafter"
    assert "accept 2.50 is below its band [2.8, 3.4]: the drafter (or the prompts) changed" in v.lines
    assert any("is still fine: the system did not slow down" in ln for ln in v.lines)


def test_both_moved(seed):
    v = judge(CODING, measured(30, 2.5), seed)
    assert v.diagnosis == "both" and len([r for r in v.reasons if r != "inconclusive"]) == 2


def test_absolute_floors_and_ttft(seed):
    b = ClassBudget("c", "coding", 256, limits={"min_tok_s": 60, "max_ttft_ms": 100})
    v = judge(b, measured(55, 3.08, ttft=0.2), seed)
    assert v.reasons == ("tok_s_below_min", "ttft_above_max")
    assert "TTFT median 200 ms > max_ttft_ms 100" in v.lines


def test_undecided_tests_make_it_inconclusive_and_show_their_evidence(seed):
    decided = {"accept_low": Decision("ok", 9, 3.08, 2.9, 3.3),
               "accept_high": Decision("ok", 9, 3.08, 2.9, 3.3),
               "efficiency": Decision("ok", 9, 0.8, 0.75, 0.85)}
    undecided = {**decided, "accept_high": Decision("unsure", 9, 3.08, 2.7, 3.45, more=14)}
    v = judge(CODING, measured(55, 3.08), seed, undecided, how=Judging(resolution=0.05))
    assert v.status == "inconclusive"
    assert "inconclusive after 8 requests: accept 3.08 vs band [2.8, 3.4]" in v.lines[0]
    evidence = next(line for line in v.lines if line.startswith("evidence (resolution 5%)"))
    assert "accept <= 3.4: 3.08 [2.7, 3.45] over 9 requests: undecided, about 14 more requests" in evidence
    failed = {**decided, "efficiency": Decision("bad", 9, 0.55, 0.5, 0.6)}
    v = judge(CODING, measured(55, 3.08), seed, failed)
    assert v.status == "fail" and v.reasons == ("efficiency_below_min",)
    assert judge(CODING, measured(55, 3.08), seed, decided).status == "pass"


def test_failures_are_errors(seed):
    m = measured(55, 3.08)
    failed = RequestRecord(error="POST /generate: HTTP 503: overloaded")
    m = replace(m, records=(*m.records, failed))
    v = judge(CODING, m, seed)
    assert v.status == "error"
    assert v.lines == ("1 of 9 requests failed: POST /generate: HTTP 503: overloaded",)


def test_estimate_is_flagged(seed):
    v = judge(CODING, measured(55, 3.08, source="estimate"), seed)
    assert v.status == "pass" and "accept_estimated" in v.reasons
    assert v.lines == ("note: accept length is an estimate from stream timing (the server "
                       "exposes no accept statistics)",)


def test_accept_above_max_is_capped_for_the_roofline(seed):
    v = judge(ClassBudget("c", "coding", 256, limits={"min_efficiency": 0.5}), measured(80, 4.3), seed)
    assert v.roofline_tok_s == pytest.approx(seed.ceiling_tok_s)
