"""The physical frontier across batches (``specbound roofline --batch 1,2,...``) and the Pareto
panel's points."""

from __future__ import annotations

import json

import pytest

from pytest_specbound.cli import main
from pytest_specbound.gate.verdicts.result import ClassResult, RooflineFigures
from pytest_specbound.gate.verdicts.verdict import Verdict
from pytest_specbound.physics.frontier import frontier
from pytest_specbound.physics.hardware import parse_hardware
from pytest_specbound.physics.models import load_model
from pytest_specbound.physics.roofline import Deployment, compute_roofline
from pytest_specbound.physics.speculative import parse_speculation
from pytest_specbound.report.plot import pareto_points


def test_the_frontier_trades_per_user_rate_for_aggregate():
    hw, model, spec = parse_hardware("a6000x2"), load_model("qwen3.6-27b"), parse_speculation("mtp:3")
    points = frontier(lambda b: compute_roofline(hw, model, spec, deployment=Deployment(batch=b)),
                      (1, 4, 16, 64), 3.08)
    assert points[0].per_user_tok_s == pytest.approx(compute_roofline(hw, model, spec).tok_s(3.08))
    per_user = [p.per_user_tok_s for p in points]
    aggregate = [p.aggregate_tok_s for p in points]
    assert per_user == sorted(per_user, reverse=True) and aggregate == sorted(aggregate)
    assert points[-1].per_gpu_tok_s == pytest.approx(points[-1].aggregate_tok_s / 2)


def test_the_cli_prints_the_frontier(capsys):
    assert main(["roofline", "--hw", "a6000x2", "--model", "qwen3.6-27b", "--spec", "mtp:3",
                 "--accept", "3.08", "--batch", "1,8,64", "--format", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert [p["batch"] for p in doc["points"]] == [1, 8, 64]
    assert doc["points"][0]["per_user_tok_s"] == pytest.approx(72.8, abs=0.1)  # the seed profile


def test_pareto_points_measured_and_frontier_per_gpu():
    roof = RooflineFigures(round_ms=10.0, components_ms={}, ceiling_tok_s=400.0, max_accept=4,
                           bound="memory", speculative="mtp:3", context=500, batch=4,
                           hardware={"name": "h100-sxm", "count": 2})
    rs = [ClassResult("b.toml", "chat", "h100-sxm", Verdict("pass", roofline_tok_s=300.0 / c),
                      concurrency=c, roofline=roof, decode_tok_s=200.0 / c,
                      aggregate_tok_s=200.0) for c in (4, 1)]
    measured, bound = pareto_points(rs)
    assert measured == [(100.0, 200.0), (100.0, 50.0)]  # level 1 first; per GPU: 2 GPUs
    assert bound == [(150.0, 300.0), (150.0, 75.0)]
