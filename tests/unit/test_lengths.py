"""Output lengths from a distribution: the draws, the budget key, and the plan's prompts."""

from __future__ import annotations

import statistics
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pytest_specbound.errors import ConfigError
from pytest_specbound.gate.pipeline.plan import plan_class
from pytest_specbound.gate.pipeline.twins import plan_twin
from pytest_specbound.gate.schema.budget import load_budget
from pytest_specbound.gate.schema.settings import Settings
from pytest_specbound.measure.lengths import LengthsProblem, OutputLengths, with_lengths
from pytest_specbound.physics.hardware import resolve_hardware
from pytest_specbound.serving.backends.base import Prompt

BUDGET = """
[model]
name = "llama-3.1-8b"
[speculative]
method = "eagle3"
steps = 3
[server]
backend = "vllm"
launch = "vllm serve m --speculative-config '{{\\"method\\": \\"eagle3\\"}}' --port {{port}}"
[classes.chat]
prompts = "chat"
max_tokens = {lengths}
samples = 40
"""


def settings(tmp_path: Path) -> Settings:
    return Settings(hw="h100", url=None, url_origin="", ca_bundle=None, launch=None,
                    backend=None, json_path=None, benchmark_json=None, plot=None,
                    log_dir=tmp_path, samples=24, min_samples=4, warmup=1, max_seconds=60.0,
                    confidence=0.95, inconclusive="fail", budgets=(), resolution=0.05)


def budget(tmp_path: Path, lengths: str):
    path = tmp_path / "gate.toml"
    path.write_text(BUDGET.format(lengths=lengths))
    return load_budget(path)


@pytest.mark.parametrize(("table", "mean", "spread"), [
    ({"mean": 256, "stdev": 64}, 256, 64),
    ({"distribution": "lognormal", "mean": 200, "stdev": 150, "max": 4000}, 200, 150),
    ({"distribution": "uniform", "min": 64, "max": 512}, 288, 129),
])
def test_draws_have_the_stated_mean_and_spread(table, mean, spread) -> None:
    lengths = OutputLengths.from_table(table)
    drawn = lengths.draw(20_000, seed=7)
    assert all(lengths.low <= n <= lengths.high for n in drawn)
    assert statistics.fmean(drawn) == pytest.approx(mean, rel=0.03)
    assert statistics.stdev(drawn) == pytest.approx(spread, rel=0.08)


def test_the_same_seed_draws_the_same_lengths_and_a_longer_run_extends_them() -> None:
    lengths = OutputLengths.from_table({"mean": 128, "stdev": 48, "min": 8})
    assert lengths.draw(50, 3) == lengths.draw(50, 3) != lengths.draw(50, 4)
    assert lengths.draw(80, 3)[:50] == lengths.draw(50, 3)


@given(st.integers(1, 4096), st.integers(0, 4096), st.integers(1, 64), st.integers(0, 2**32))
def test_clipped_to_min_and_max(mean: int, stdev: int, low: int, seed: int) -> None:
    lengths = OutputLengths.from_table({"mean": mean, "stdev": stdev, "min": low,
                                        "max": max(low, mean * 2)})
    assert all(low <= n <= max(low, mean * 2) for n in lengths.draw(20, seed))


@pytest.mark.parametrize(("table", "needle"), [
    ({"mean": 256}, "needs mean and stdev"),
    ({"distribution": "uniform", "min": 64}, "needs min and max"),
    ({"distribution": "zipf", "mean": 1, "stdev": 1}, "valid: normal, lognormal, uniform"),
    ({"mean": 256, "stdev": 9, "average": 3}, "unknown key 'average'"),
    ({"mean": 256, "stdev": -1}, "stdev must be a non-negative number"),
    ({"mean": 256, "stdev": 9, "min": 600, "max": 500}, "min <= max"),
    ({"distribution": "uniform", "min": 1.5, "max": 9}, "whole number"),
])
def test_bad_tables_say_which_key(table, needle) -> None:
    with pytest.raises(LengthsProblem, match=needle):
        OutputLengths.from_table(table)


def test_budget_error_is_one_line_naming_the_key(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as err:
        budget(tmp_path, "{ mean = 256 }")
    text = str(err.value)
    assert text.startswith(f"{tmp_path / 'gate.toml'}:12: classes.chat.max_tokens: ")
    assert "needs mean and stdev" in text and "e.g. {mean = 256" in text and "\n" not in text


def test_each_request_gets_its_own_draw_and_the_twin_the_same(tmp_path: Path) -> None:
    b = budget(tmp_path, "{ mean = 300, stdev = 100, min = 32, max = 600 }")
    cls = b.classes["chat"]
    assert cls.max_tokens == 300 and cls.output_lengths is not None
    hw = resolve_hardware("h100")
    plan = plan_class(b, cls, hw, settings(tmp_path))
    lengths = [p.max_tokens for p in plan.prompts]
    assert len(lengths) >= 40 + 2 and all(n is not None and 32 <= n <= 600 for n in lengths)
    assert len(set(lengths)) > len(lengths) // 2  # drawn, not one number
    chat = {p.text or p.messages for p in plan.prompts}
    assert len(chat) < len(plan.prompts)  # the set's prompts repeat, with other lengths
    twin = plan_twin(b, cls, hw, settings(tmp_path), 1)
    assert [p.max_tokens for p in twin.prompts] == lengths
    assert plan_class(b, cls, hw, settings(tmp_path)).prompts == plan.prompts  # every run


def test_a_prompt_files_own_length_wins() -> None:
    prompts = [Prompt(text="a", max_tokens=7), Prompt(text="b")]
    out = with_lengths(prompts, OutputLengths.from_table({"mean": 100, "stdev": 0}), 5, 1)
    assert [p.max_tokens for p in out] == [7, 100, 7, 100, 7, 100]


def test_a_fixed_max_tokens_leaves_the_prompts_alone(tmp_path: Path) -> None:
    b = budget(tmp_path, "64")
    cls = b.classes["chat"]
    assert cls.max_tokens == 64 and cls.output_lengths is None
    plan = plan_class(b, cls, resolve_hardware("h100"), settings(tmp_path))
    assert all(p.max_tokens is None for p in plan.prompts)
