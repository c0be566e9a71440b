"""The speculative terms of a round (#15): each draft step a forward with its kernels' floor, the
acceptance step's logits, an engine's own cost per draft forward, and the per-backend constant."""

from __future__ import annotations

import textwrap

import pytest

from pytest_specbound.errors import ConfigError
from pytest_specbound.gate.pipeline.plan import roofline_for
from pytest_specbound.gate.schema.budget import load_budget
from pytest_specbound.physics import roofline as rl
from pytest_specbound.physics.hardware import Hardware, parse_hardware
from pytest_specbound.physics.models import load_model
from pytest_specbound.physics.overheads import BACKEND_OVERHEAD_MS, FALLBACK, overhead_for
from pytest_specbound.physics.speculative import parse_speculation


@pytest.mark.parametrize("spec, forwards", [
    ("none", 0), ("ngram:4", 0), ("dflash:7", 1), ("eagle3:5", 5), ("eagle3:6:10", 6),
    ("mtp:3", 3), ("draft:4", 4),
])
def test_draft_forwards_per_round(spec, forwards):
    assert rl.draft_forwards(parse_speculation(spec)) == forwards


def test_a_tiny_drafters_forwards_cost_their_kernels_floor_on_a_gpu(tmp_path):
    """A 1-layer 128-wide drafter reads almost nothing; each of its forwards still runs its
    kernels, which the GPU cannot finish in less than the per-kernel floor."""
    from pytest_specbound.physics.gguf_writer import LlamaShape, write_llama_gguf

    tiny = load_model(str(write_llama_gguf(tmp_path / "d.gguf", LlamaShape(n_layers=1, hidden=128,
                                                                           ffn=256, heads=2))))
    target = load_model("llama-3.1-8b")
    spec = parse_speculation("draft:4")
    roof = rl.compute_roofline(parse_hardware("h100"), target, spec, tiny)
    floor = (rl.OPS_PER_LAYER * 1 + rl.OPS_PER_FORWARD) * rl.OP_FLOOR_MS
    assert roof.components_ms["draft"] >= 4 * floor
    assert roof.components_ms["draft"] == pytest.approx(4 * floor, rel=0.05)  # the floor binds


def test_the_floor_does_not_touch_large_forwards_or_the_seed():
    """An EAGLE step reads ~0.8 GB: its read time is far above its kernels' floor."""
    target = load_model("llama-3.1-8b")
    roof = rl.compute_roofline(parse_hardware("h100"), target, parse_speculation("eagle3:3"))
    step_read = roof.components_ms["draft"] / 3
    assert step_read > 5 * (rl.OPS_PER_LAYER + rl.OPS_PER_FORWARD) * rl.OP_FLOOR_MS


def test_no_kernel_floor_on_the_cpu_host(tmp_path):
    from pytest_specbound.physics.gguf_writer import LlamaShape, write_llama_gguf

    tiny = load_model(str(write_llama_gguf(tmp_path / "d.gguf", LlamaShape(n_layers=1, hidden=64,
                                                                           ffn=128, heads=2))))
    host = Hardware("cpu", "cpu", 1, 30.0, 0.0, 1.0, "none", 0.0, "probe")
    roof = rl.compute_roofline(host, tiny, parse_speculation("draft:3"), tiny)
    floor = (rl.OPS_PER_LAYER + rl.OPS_PER_FORWARD) * rl.OP_FLOOR_MS
    assert roof.components_ms["draft"] < 3 * floor  # its reads alone, well under the floor


def test_the_acceptance_step_reads_the_verified_positions_logits():
    target = load_model("llama-3.1-8b")
    hw = parse_hardware("h100")
    roof = rl.compute_roofline(hw, target, parse_speculation("ngram:3"))
    expected = 4 * target.vocab * rl.LOGIT_BYTES / (hw.bandwidth_gbs * 1e9) * 1e3
    assert roof.components_ms["draft"] == pytest.approx(expected)
    assert rl.compute_roofline(hw, target, parse_speculation("none")).components_ms["draft"] == 0


def test_an_engines_cost_per_draft_forward_is_added_per_forward():
    target = load_model("llama-3.1-8b")
    hw = parse_hardware("h100")
    base = rl.compute_roofline(hw, target, parse_speculation("eagle3:4"))
    slow = base.what_if(draft_step_ms=0.7)
    assert slow.components_ms["draft"] - base.components_ms["draft"] == pytest.approx(4 * 0.7)
    assert slow.to_dict()["draft_step_ms"] == 0.7 and slow.to_dict()["draft_forwards"] == 4
    ngram = rl.compute_roofline(hw, target, parse_speculation("ngram:4"),
                                deployment=rl.Deployment(draft_step_ms=0.7))
    assert ngram.components_ms["draft"] < 0.01  # n-gram lookup runs no forward
    with pytest.raises(ConfigError, match="draft_step_ms=-1: must be >= 0"):
        rl.compute_roofline(hw, target, parse_speculation("eagle3:4"),
                            deployment=rl.Deployment(draft_step_ms=-1))


def budget(tmp_path, backend: str, roofline: str = "", method: str = "eagle3",
           speculative: str = "") -> object:
    """A budget on ``backend``; ``speculative`` adds lines after ``steps = 3`` (line 6 on)."""
    path = tmp_path / "b.toml"
    spec_lines = f"{speculative}\n" if speculative else ""
    path.write_text(textwrap.dedent(f"""\
        [model]
        name = "llama-3.1-8b"
        [speculative]
        method = "{method}"
        steps = 3
        """) + spec_lines + textwrap.dedent(f"""\
        [server]
        backend = "{backend}"
        url = "http://127.0.0.1:1"
        {roofline}
        [classes.chat]
        """))
    return load_budget(path)


@pytest.mark.parametrize("backend", ["sglang", "vllm"])
def test_the_scheduler_constant_is_the_backends_with_its_source(tmp_path, backend):
    roof = roofline_for(budget(tmp_path, backend), parse_hardware("h100"), {})
    ms, source = BACKEND_OVERHEAD_MS[backend]
    assert roof.components_ms["overhead"] == ms and roof.overhead_source == source
    assert roof.to_dict()["overhead_source"] == source
    from pytest_specbound.gate.verdicts.result import RooflineFigures

    figures = RooflineFigures.of(roof).to_json()  # what the results JSON carries
    assert figures["overhead_source"] == source and figures["draft_forwards"] == 3
    assert RooflineFigures.from_json(figures).to_json() == figures


def test_an_engine_without_a_measurement_says_the_figure_is_assumed(tmp_path):
    roof = roofline_for(budget(tmp_path, "trtllm"), parse_hardware("h100"), {})
    assert roof.components_ms["overhead"] == FALLBACK[0]
    assert "[assumed]" in roof.overhead_source
    assert overhead_for(None) == FALLBACK and overhead_for("auto") == FALLBACK


def test_the_budget_wins_and_is_named(tmp_path):
    b = budget(tmp_path, "vllm", "[roofline]\n        overhead_ms = 0.05\n        draft_step_ms = 0.4")
    roof = roofline_for(b, parse_hardware("h100"), {})
    assert roof.components_ms["overhead"] == 0.05
    assert roof.overhead_source.endswith("b.toml:10: roofline.overhead_ms")
    assert roof.draft_step_ms == 0.4


def test_a_negative_engine_cost_in_a_budget_names_the_line(tmp_path):
    with pytest.raises(ConfigError, match=r"b.toml:10: roofline.draft_step_ms: -0.1 is outside"):
        budget(tmp_path, "vllm", "[roofline]\n        draft_step_ms = -0.1")


def test_a_heads_own_dtype_scales_its_reads():
    """An NVFP4 EAGLE head (TensorRT Edge-LLM) reads about a quarter of its bf16 bytes; an MTP
    head's dtype replaces the target's."""
    hw, target = parse_hardware("h100"), load_model("llama-3.1-8b")
    spec = parse_speculation("eagle3:4")
    bf16 = rl.compute_roofline(hw, target, spec)
    fp4 = rl.compute_roofline(hw, target, spec, head_dtype="nvfp4")
    accept = rl.compute_roofline(hw, target, parse_speculation("ngram:4")).components_ms["draft"]
    ratio = (fp4.components_ms["draft"] - accept) / (bf16.components_ms["draft"] - accept)
    assert ratio == pytest.approx(0.5625 / 2, rel=1e-6)
    assert fp4.to_dict()["head_dtype"] == "fp4" and fp4.what_if().head_dtype == "fp4"
    seed = load_model("qwen3.6-27b")
    mtp = rl.compute_roofline(parse_hardware("a6000x2"), seed, parse_speculation("mtp:3"))
    mtp8 = rl.compute_roofline(parse_hardware("a6000x2"), seed, parse_speculation("mtp:3"),
                               head_dtype="fp8")
    assert mtp8.components_ms["draft"] < 0.6 * mtp.components_ms["draft"]
    with pytest.raises(ConfigError, match="draft_dtype=fp5: unknown dtype"):
        rl.compute_roofline(hw, target, spec, head_dtype="fp5")


def test_a_budget_gives_a_head_its_dtype_and_refuses_one_without_a_head(tmp_path):
    b = budget(tmp_path, "vllm", speculative='draft_dtype = "nvfp4"')
    assert b.head_dtype == "fp4" and b.draft_model is None
    roof = roofline_for(b, parse_hardware("h100"), {})
    assert roof.head_dtype == "fp4"
    from pytest_specbound.gate.verdicts.result import RooflineFigures

    assert RooflineFigures.of(roof).to_json()["head_dtype"] == "fp4"
    with pytest.raises(ConfigError, match=r"b.toml:6: speculative.draft_dtype: needs a "
                       r"draft_model or a drafting head to apply to \(mtp, eagle, eagle3, "
                       r"dflash\)"):
        budget(tmp_path, "vllm", method="ngram", speculative='draft_dtype = "nvfp4"')
