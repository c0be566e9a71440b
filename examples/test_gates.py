"""Example: performance gates as Python tests (run with --specbound-hw=... on a GPU runner)."""

import pytest


@pytest.mark.specbound(
    prompt_class="coding",
    accept=(2.4, 3.2),
    min_efficiency=0.6,
    model="llama-3.1-8b",
    speculative="eagle3:3",
    server={"url": "http://127.0.0.1:8000", "backend": "vllm",
            "model_id": "meta-llama/Llama-3.1-8B-Instruct"},
)
def test_coding_gate(specbound_measure, specbound_check):
    result = specbound_measure()
    specbound_check(result)


@pytest.mark.specbound(budget="budgets/qwen3.6-27b.toml", prompt_class="repetitive")
def test_seed_repetitive(specbound_measure, specbound_check, specbound_roofline):
    # the roofline is there to print or assert on directly
    assert specbound_roofline.ceiling_tok_s > 0
    specbound_check(specbound_measure())
