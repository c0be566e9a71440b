"""The catalog gaps of issue 15: every GPU and model named there, each with its source, and the
geometry that some of them need (MXFP4 experts, alternating MoE layers) checked against
published sizes."""

from __future__ import annotations

import json

import pytest

from pytest_specbound.cli import main
from pytest_specbound.physics.hardware import builtin_catalog, parse_hardware
from pytest_specbound.physics.models import catalog, load_model

GPUS = ["rtx5090", "rtx-pro-6000", "rtx6000-ada", "l40", "a40", "h20", "h20-141g", "b300",
        "gb200", "gb300", "mi325x", "mi355x", "jetson-thor"]
MODELS = ["gpt-oss-20b", "gpt-oss-120b", "qwen3-32b", "qwen3-235b-a22b", "qwen2.5-7b",
          "qwen2.5-72b", "llama-4-scout", "llama-4-maverick", "deepseek-v3", "mistral-small-24b",
          "mistral-large-123b", "gemma-3-27b", "qwen3-1.7b", "qwen3-4b"]


@pytest.mark.parametrize("name", GPUS)
def test_each_new_gpu_has_its_numbers_and_a_source(name):
    entry = builtin_catalog()[name]
    assert entry["source"] and len(entry["source"]) > 20
    hw = parse_hardware(f"{name}x2")
    assert hw.bandwidth_gbs > 0 and hw.memory_gb > 0 and hw.bf16_tflops > 0 and hw.count == 2


@pytest.mark.parametrize("name", MODELS)
def test_each_new_model_loads_with_a_source(name):
    m = load_model(name)
    assert m.weight_bytes > 1e9 and m.source


@pytest.mark.parametrize(("name", "checkpoint_gib", "active_b"),
                         [("gpt-oss-20b", 12.8, 3.6), ("gpt-oss-120b", 60.8, 5.1)])
def test_gpt_oss_mxfp4_experts_count_to_the_checkpoint_size(name, checkpoint_gib, active_b):
    """Routed experts at MXFP4 (4.25 bits), the rest at bf16: the model card's checkpoint sizes
    and active parameter counts come out within 1%."""
    m = load_model(name)
    assert m.weight_bytes / 2**30 == pytest.approx(checkpoint_gib, rel=0.01)
    assert m.active_params / 1e9 == pytest.approx(active_b, rel=0.02)
    assert catalog()[name]["expert_dtype"] == "mxfp4"


@pytest.mark.parametrize(("name", "total_b", "moe_layers"),
                         [("llama-4-scout", 108, 48), ("llama-4-maverick", 401, 24)])
def test_llama4_alternating_moe_layers_and_shared_expert(name, total_b, moe_layers):
    """Scout: MoE in every layer; Maverick: every second layer (interleave_moe_layer_step = 2),
    the others dense with the wider intermediate_size_mlp. Text-model totals 108B and 401B
    (109B and 400B published with the vision encoder), 17B active."""
    m = load_model(name)
    assert m.moe_layers == moe_layers
    assert m.weight_bytes / 2 / 1e9 == pytest.approx(total_b, rel=0.01)
    assert m.active_params / 1e9 == pytest.approx(16.1, rel=0.05)


def test_published_parameter_counts_of_dense_and_moe_additions():
    for name, billions in (("qwen3-32b", 32.8), ("qwen3-235b-a22b", 235), ("qwen2.5-7b", 7.6),
                           ("qwen2.5-72b", 72.7), ("mistral-small-24b", 23.6),
                           ("mistral-large-123b", 122.6), ("gemma-3-27b", 27.0)):
        assert load_model(name).weight_bytes / 2 / 1e9 == pytest.approx(billions, rel=0.02), name


def test_specbound_models_lists_the_catalog(capsys):
    assert main(["models"]) == 0
    out = capsys.readouterr().out
    assert "gpt-oss-120b" in out and "bf16+mxfp4" in out and "(also: deepseek-v3)" in out
    assert main(["models", "--format", "json"]) == 0
    rows = {r["name"]: r for r in json.loads(capsys.readouterr().out)}
    assert set(MODELS) - {"deepseek-v3"} <= set(rows)
    assert rows["llama-4-maverick"]["experts"] == [128, 1]


def test_specbound_hw_lists_the_additions(capsys):
    assert main(["hw"]) == 0
    out = capsys.readouterr().out
    for name in GPUS:
        assert f"\n{name} " in out
