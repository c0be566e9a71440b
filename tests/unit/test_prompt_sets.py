"""Prompt sets from the user's files: plain JSONL, MT-bench questions, ShareGPT conversations
(JSONL or a JSON array), categories selected, errors naming file and line."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pytest_specbound.errors import ConfigError
from pytest_specbound.gate.budget import load_budget
from pytest_specbound.measure.prompt_sets import select
from pytest_specbound.measure.prompts import load_prompts

MT = [{"question_id": 81, "category": "writing", "turns": ["Write a poem.", "Now shorter."]},
      {"question_id": 101, "category": "reasoning", "turns": ["Why?"]}]
SHAREGPT = [{"id": "a", "conversations": [{"from": "human", "value": "Hi"},
                                          {"from": "gpt", "value": "Hello"},
                                          {"from": "human", "value": "More"}]}]


def test_mt_bench_turns_become_a_first_message_and_follow_ups(tmp_path):
    path = tmp_path / "question.jsonl"
    path.write_text("\n".join(json.dumps(q) for q in MT))
    prompts = load_prompts(str(path))
    assert prompts[0].messages == ({"role": "user", "content": "Write a poem."},)
    assert prompts[0].follow_ups == ("Now shorter.",) and prompts[0].category == "writing"
    assert prompts[1].follow_ups == ()
    assert [p.category for p in select(prompts, ("reasoning",), "x")] == ["reasoning"]
    with pytest.raises(ConfigError, match=r"^x: no prompts in categories math; the file has: "
                                          r"reasoning, writing$"):
        select(prompts, ("math",), "x")


def test_sharegpt_as_a_json_array_replays_the_human_turns(tmp_path):
    path = tmp_path / "sg.json"
    path.write_text(json.dumps(SHAREGPT))
    (p,) = load_prompts(str(path))
    assert p.messages == ({"role": "user", "content": "Hi"},) and p.follow_ups == ("More",)


@pytest.mark.parametrize(("line", "needle"), [
    ('{"turns": []}', r"f\.jsonl:1: key 'turns' must hold one or more non-empty user turns"),
    ('{"conversations": "x"}', r"f\.jsonl:1: key 'conversations' must be a list"),
    ('{"text": "x"}', r"f\.jsonl:1: unknown key 'text'; valid: prompt, messages, max_tokens, "
                      r"category \(or .*MT-bench"),
    ("[1, 2", r"f\.jsonl: invalid JSON")])
def test_bad_entries_name_file_and_line(tmp_path, line, needle):
    path = tmp_path / "f.jsonl"
    path.write_text(line + "\n")
    with pytest.raises(ConfigError, match=needle):
        load_prompts(str(path))


@given(st.lists(st.text(min_size=1, max_size=20), min_size=1, max_size=4),
       st.sampled_from(["writing", "coding", None]))
def test_any_turns_round_trip(turns, category):
    from pytest_specbound.measure.prompt_sets import to_prompt

    p = to_prompt({"turns": turns, **({"category": category} if category else {})}, "w")
    assert [p.messages[0]["content"], *p.follow_ups] == turns and p.category == category


def test_a_budget_class_selects_categories_of_its_file(tmp_path):
    (tmp_path / "mt.jsonl").write_text("\n".join(json.dumps(q) for q in MT))
    base = '[model]\nname = "llama-3.1-8b"\n[server]\nurl = "http://h:1"\n[classes.chat]\n'
    path = tmp_path / "b.toml"
    path.write_text(base + 'prompts = "mt.jsonl"\ncategory = ["writing", "roleplay"]\n')
    assert load_budget(path).classes["chat"].category == ("writing", "roleplay")
    path.write_text(base + 'category = "writing"\n')
    with pytest.raises(ConfigError, match=r"classes\.chat\.category: selects within a prompt "
                                          r"file: set prompts = \"PATH\""):
        load_budget(path)


def test_speed_bench_rows_read_as_mt_bench_questions(tmp_path):
    """SPEED-Bench's published fields (question_id and src_id as strings, sub_category,
    source, difficulty, multiturn): the turns and the category are what is read."""
    row = {"question_id": "q-1", "category": "coding", "sub_category": "python",
           "turns": ["Write fizzbuzz.", "Now in one line."], "source": "x", "src_id": "7",
           "difficulty": "easy", "multiturn": True}
    path = tmp_path / "speed.jsonl"
    path.write_text(json.dumps(row) + "\n")
    (p,) = load_prompts(str(path))
    assert p.category == "coding" and p.follow_ups == ("Now in one line.",)
