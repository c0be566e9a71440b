"""The typed class result: one JSON form, read back unchanged (workers and results files)."""

from __future__ import annotations

import json

import pytest

from pytest_specbound.gate.judging.judge import judge
from pytest_specbound.gate.schema.class_budget import ClassBudget
from pytest_specbound.gate.verdicts.result import ClassResult, RooflineFigures
from pytest_specbound.gate.verdicts.verdict import Verdict
from pytest_specbound.measure.measurement import Measurement, Stop
from pytest_specbound.measure.sequential import Decision
from pytest_specbound.physics.hardware import parse_hardware
from pytest_specbound.physics.models import load_model
from pytest_specbound.physics.roofline import compute_roofline
from pytest_specbound.physics.speculative import parse_speculation
from pytest_specbound.serving.records import RequestRecord, ServerInfo


@pytest.fixture(scope="module")
def result() -> ClassResult:
    roof = compute_roofline(parse_hardware("a6000x2"), load_model("qwen3.6-27b"),
                            parse_speculation("mtp:3"))
    records = [RequestRecord(prompt_tokens=50, completion_tokens=257, ttft_s=0.08,
                             decode_s=256 / (50.0 + i), accept_length=3.0 + 0.01 * i,
                             accept_source="server", server={"timings": {"n": i}})
               for i in range(6)]
    m = Measurement("sglang", records, warmup=1, stopped="fixed count of 6 requests",
                    stop=Stop.FIXED_COUNT, info=ServerInfo(("qwen",), "0.5", {"steps": 3}))
    cls = ClassBudget("coding", "coding", 256, limits={"accept": (2.8, 3.4), "min_efficiency": 0.5})
    verdict = judge(cls, m, roof, {"accept_low": Decision("ok", 6, 3.0, 2.9, 3.2),
                                   "accept_high": Decision("ok", 6, 3.0, 2.9, 3.2),
                                   "efficiency": Decision("bad", 6, 0.35, 0.3, 0.4)})
    base = ClassResult("budgets/q.toml", "coding", "a6000x2", verdict, budget_sha256="ab",
                       model=roof.model.name, roofline=RooflineFigures.of(roof),
                       bounds={"accept_length": (2.9, 3.2)}, confidence_level=0.99,
                       elapsed_s=1.5, nodeid="budgets/q.toml::coding",
                       limits={"accept": cls.accept, "min_efficiency": 0.5})
    return base.with_measurement(m)


def test_json_round_trip_is_exact(result):
    data = json.loads(json.dumps(result.to_json()))  # what travels between xdist workers
    back = ClassResult.from_json(data)
    assert back == result
    assert back.to_json() == result.to_json()


def test_the_verdict_and_figures_are_typed(result):
    assert result.status == "fail" and result.verdict.diagnosis == "system"
    assert "efficiency_below_min" in result.verdict.reasons
    assert result.accept_source == "server" and result.server.version == "0.5"
    assert result.ttft_ms.median == pytest.approx(80.0)
    assert result.label == "q.toml::coding[a6000x2]"


def test_json_view_by_key(result):
    assert result["verdict"] == "fail" and result["decode_tok_s"] == result.decode_tok_s
    with pytest.raises(KeyError, match="'decode_tok' is not a results key; valid: budget"):
        result["decode_tok"]


def test_a_setup_error_has_every_key():
    r = ClassResult("b.toml", "chat", "h100", Verdict("error", ["no server"], ("setup",)))
    data = r.to_json()
    assert data["verdict"] == "error" and data["reasons"] == ["setup"]
    assert data["roofline"] is None and data["requests"] == []
    assert ClassResult.from_json(data) == r


@pytest.mark.parametrize("bad", [{}, {"budget": "b", "class": "c"},
                                 {"budget": "b", "class": "c", "hardware": "h",
                                  "accept_band": [1]}])
def test_malformed_results_are_one_value_error(bad):
    with pytest.raises(ValueError, match="not a class result"):
        ClassResult.from_json(bad)


@pytest.mark.parametrize(("hw", "model", "spec"), [("a6000x2", "qwen3.6-27b", "mtp:3"),
                                                   ("h100", "llama-3.1-8b", "eagle3:3"),
                                                   ("h100", "llama-3.1-8b", "none")])
def test_a_results_roofline_is_the_rooflines_own_json(hw, model, spec):
    """Typed straight from the Roofline, it reads exactly as its JSON form reads back."""
    from pytest_specbound import compute_roofline, load_model, parse_hardware, parse_speculation
    from pytest_specbound.gate.verdicts.result import RooflineFigures

    roof = compute_roofline(parse_hardware(hw), load_model(model), parse_speculation(spec))
    assert RooflineFigures.of(roof) == RooflineFigures.from_json(roof.to_dict())
