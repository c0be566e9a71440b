"""Prompt sets through ``datasets`` (``prompts = "hf:..."``), read here from local dataset
folders laid out as the hub's are (no network): the hub's MT-bench rows, SPEED-Bench's config
and split, and the one-line errors."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from pytest_specbound.errors import ConfigError
from pytest_specbound.measure.hub_sets import load_hub
from pytest_specbound.measure.prompt_sets import select
from pytest_specbound.measure.prompts import load_prompts

pytest.importorskip("datasets")  # the dev extra installs it; the plugin runs without


@pytest.fixture(autouse=True)
def offline(monkeypatch: pytest.MonkeyPatch, tmp_path_factory: pytest.TempPathFactory) -> None:
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path_factory.getbasetemp() / "hf-home"))
    load_hub.cache_clear()


def write_rows(path: Path, rows: list[dict]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


def test_the_hubs_mt_bench_rows_are_two_turn_questions(tmp_path: Path) -> None:
    # HuggingFaceH4/mt_bench_prompts: prompt (the turns), prompt_id, category, reference
    write_rows(tmp_path / "mt" / "train.jsonl", [
        {"prompt": ["Write a haiku.", "Now another."], "prompt_id": 81, "category": "writing",
         "reference": []},
        {"prompt": ["What is 3*7?", "And 3*8?"], "prompt_id": 111, "category": "math",
         "reference": ["21", "24"]}])
    prompts = load_prompts(f"hf:{tmp_path / 'mt'}@train")
    (writing,) = select(prompts, ["writing"], "prompts")
    assert writing.messages == ({"role": "user", "content": "Write a haiku."},)
    assert writing.follow_ups == ("Now another.",)


def test_speed_bench_config_and_split(tmp_path: Path) -> None:
    root = tmp_path / "SPEED-Bench"
    (root).mkdir()
    (root / "README.md").write_text(
        "---\nconfigs:\n- config_name: qualitative\n  data_files:\n  - split: test\n"
        "    path: qualitative/test.jsonl\n- config_name: throughput_1k\n  data_files:\n"
        "  - split: test\n    path: throughput_1k/test.jsonl\n---\n")
    row = {"question_id": "q", "category": "coding", "sub_category": "python", "source": "s",
           "src_id": "1", "difficulty": "easy", "multiturn": False}
    write_rows(root / "qualitative" / "test.jsonl",
               [{**row, "turns": ["Write fizzbuzz."]}, {**row, "category": "math",
                                                         "turns": ["Integrate x^2."]}])
    write_rows(root / "throughput_1k" / "test.jsonl", [{**row, "turns": ["long " * 50]}])
    prompts = load_prompts(f"hf:{root}:qualitative@test")
    assert [p.category for p in prompts] == ["coding", "math"]
    (only,) = load_prompts(f"hf:{root}:throughput_1k")  # one split: taken without naming it
    assert only.messages is not None and only.messages[0]["content"].startswith("long")


def test_several_splits_must_be_named(tmp_path: Path) -> None:
    write_rows(tmp_path / "d" / "train.jsonl", [{"prompt": "a"}])
    write_rows(tmp_path / "d" / "test.jsonl", [{"prompt": "b"}])
    with pytest.raises(ConfigError) as err:
        load_prompts(f"hf:{tmp_path / 'd'}", "classes.chat.prompts")
    text = str(err.value)
    assert "has splits test, train: name one" in text and "@test" in text and "\n" not in text
    assert [p.text for p in load_prompts(f"hf:{tmp_path / 'd'}@test")] == ["b"]


@pytest.mark.parametrize(("spec", "needle"), [
    ("hf:", "expected hf:NAME[:CONFIG][@SPLIT]"),
    ("hf:a:b:c", "expected hf:NAME[:CONFIG][@SPLIT]"),
    ("hf:{missing}", "could not load"),
])
def test_failures_are_one_line_naming_the_setting(tmp_path: Path, spec: str, needle: str) -> None:
    spec = spec.format(missing=tmp_path / "nowhere")
    with pytest.raises(ConfigError) as err:
        load_prompts(spec, "b.toml:9: classes.chat.prompts")
    text = str(err.value)
    assert text.startswith(f"b.toml:9: classes.chat.prompts={spec!r}: ") and needle in text
    assert "\n" not in text


def test_without_the_extra_it_says_how_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "datasets", None)  # import datasets -> ImportError
    with pytest.raises(ConfigError, match=r"needs the datasets extra: pip install "
                                          r"'pytest-specbound\[datasets\]'"):
        load_prompts("hf:nvidia/SPEED-Bench:qualitative@test")


def test_a_budget_names_a_hub_set_and_its_category(tmp_path: Path) -> None:
    from pytest_specbound.gate.schema.budget import load_budget

    (tmp_path / "b.toml").write_text(
        '[model]\nname = "llama-3.1-8b"\n[speculative]\nmethod = "none"\n[server]\n'
        'backend = "vllm"\nurl = "http://127.0.0.1:1"\n[classes.coding]\n'
        'prompts = "hf:nvidia/SPEED-Bench:qualitative@test"\ncategory = "coding"\n')
    cls = load_budget(tmp_path / "b.toml").classes["coding"]
    assert cls.prompts == "hf:nvidia/SPEED-Bench:qualitative@test" and cls.category == ("coding",)
