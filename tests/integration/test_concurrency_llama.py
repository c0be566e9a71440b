"""Concurrency levels against a real llama-server: four slots batch, one slot does not."""

from __future__ import annotations

import json

import pytest

from tests.conftest import PYTESTER_INI
from tests.integration.budgets import llama_budget

pytestmark = pytest.mark.integration


def budget(gguf_models, extra: str) -> str:
    return llama_budget(gguf_models["target"], gguf_models["draft"],
                        "max_tokens = 96\naccept = [1.8, 3.2]\nmin_efficiency = 0.02\n" + extra
                        + "\n", roofline="threads = 1")


def slots(launch_llama, n: int):
    # later flags win in llama.cpp's argument parser: n slots of 2048 tokens each
    return launch_llama("target", "--spec-synth-len", "2.5", "-np", str(n), "-c", str(2048 * n),
                        draft=True)


def run(pytester, server, gguf_models, extra: str):
    pytester.makeini(PYTESTER_INI)
    (pytester.path / "budgets").mkdir(exist_ok=True)
    (pytester.path / "budgets" / "llama.toml").write_text(budget(gguf_models, extra))
    result = pytester.runpytest("--specbound-hw=cpu", f"--specbound-url={server.url}",
                                "--specbound-samples=12", "--specbound-json=r.json", "-v",
                                "budgets/")
    doc = json.loads((pytester.path / "r.json").read_text())
    return result, {r["concurrency"]: r for r in doc["results"]}


def test_four_slots_pass_at_concurrency_one_and_four(pytester, launch_llama, gguf_models):
    result, rs = run(pytester, slots(launch_llama, 4), gguf_models, "concurrency = [1, 4]")
    out = result.stdout.str()
    result.assert_outcomes(passed=2)
    assert "coding[cpu-c1] PASSED" in out and "coding[cpu-c4] PASSED" in out
    one, four = rs[1], rs[4]
    assert one["accept_source"] == four["accept_source"] == "server"  # draft_n per request
    assert four["co_decoding"] > 2.5, four["co_decoding"]  # the slots decode together
    # the aggregate is the per-user rate times the sequences decoding at once (whether it grows
    # with N depends on the model: this one is so small that per-step costs dominate; the demo
    # test checks growth on a model whose weight read dominates)
    assert four["aggregate_tok_s"] / four["decode_tok_s"] == pytest.approx(four["co_decoding"],
                                                                          rel=0.25)
    assert four["roofline"]["batch"] == 4 and one["roofline"]["batch"] == 1
    assert all(r["concurrency"] == 4 and r["in_flight"] > 2.5 for r in four["requests"])


def test_a_tight_floor_at_four_fails_as_the_system(pytester, launch_llama, gguf_models):
    result, rs = run(pytester, slots(launch_llama, 4), gguf_models,
                     "concurrency = [1, 4]\n[classes.coding.c4]\nmin_efficiency = 0.99")
    result.assert_outcomes(passed=1, failed=1)
    assert rs[4]["verdict"] == "fail" and rs[4]["diagnosis"] == "system"
    assert "efficiency_below_min" in rs[4]["reasons"] and "not_batching" not in rs[4]["reasons"]
    assert "per user at concurrency 4, batch 4 < floor" in result.stdout.str()


def test_one_slot_at_concurrency_four_does_not_batch(pytester, launch_llama, gguf_models):
    result, rs = run(pytester, slots(launch_llama, 1), gguf_models, "concurrency = 4")
    result.assert_outcomes(failed=1)
    out = result.stdout.str()
    assert "the server did not batch: 4 requests in flight" in out
    assert "llamacpp caps concurrent sequences with -np / --parallel (slots)" in out
    assert "not_batching" in rs[4]["reasons"] and rs[4]["co_decoding"] < 1.5
