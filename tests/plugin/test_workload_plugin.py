"""The peers' workloads through the plugin: a ShareGPT-shaped file read as `vllm bench serve`
reads it (skips counted, one request per sample), and random prompts on a server without a
tokenize route (lengths estimated, and said to be)."""

from __future__ import annotations

import json

from tests.plugin.conftest import budget_text
from tests.plugin.test_plugin import write_budget

LONG = "Explain how a hash map resolves collisions, with an example please."


def conversation(*turns: tuple[str, str]) -> dict[str, object]:
    return {"id": "x", "conversations": [{"from": w, "value": v} for w, v in turns]}


def test_a_sharegpt_file_is_read_as_the_peers_read_it(pytester_env, fake_vllm):
    rows = [conversation(("human", LONG), ("gpt", "A reply of about forty characters, ok.")),
            conversation(("gpt", "Hello!"), ("human", LONG), ("gpt", "x" * 40),
                         ("human", "And then?")),
            conversation(("gpt", "No human turn at all in this one.")),
            conversation(("human", ""), ("gpt", "?"))]
    (pytester_env.path / "budgets").mkdir()
    (pytester_env.path / "budgets" / "sg.json").write_text(json.dumps(rows))
    text = budget_text(fake_vllm.url, accept="[1, 5]", min_eff=0.01).replace(
        'prompts = "chat"\nmax_tokens = 41', 'prompts = "sg.json"')
    write_budget(pytester_env, text)
    result = pytester_env.runpytest("--specbound-hw=h100", "--specbound-samples=6",
                                    "--specbound-json=r.json")
    out = result.stdout.str()
    assert ("gate.toml::chat prompts: skipped 2 of 4 conversations: no human turn 2; each "
            "conversation's first human turn is the prompt") in out, out
    (r,) = json.loads((pytester_env.path / "r.json").read_text())["results"]
    assert r["workload"]["skipped"] == {"no human turn": 2}
    assert r["workload"]["unmeasured_per_request"] == 0 and r["workload"]["turns"] == "first"
    sent = [q["body"] for q in fake_vllm.requests if q["path"].endswith("completions")]
    # one request per sample, each the first human turn with its reply's length (10 tokens)
    assert all(b["messages"] == [{"role": "user", "content": LONG}] for b in sent), sent
    assert {b["max_tokens"] for b in sent} == {10}


def test_replaying_a_conversation_costs_unmeasured_generations_and_says_so(pytester_env,
                                                                           fake_vllm):
    rows = [conversation(("human", LONG), ("gpt", "x" * 40), ("human", "And then?"),
                         ("gpt", "y" * 40), ("human", "Why?"))]
    (pytester_env.path / "budgets").mkdir()
    (pytester_env.path / "budgets" / "sg.json").write_text(json.dumps(rows))
    text = budget_text(fake_vllm.url, accept="[1, 5]", min_eff=0.01).replace(
        'prompts = "chat"', 'prompts = "sg.json"\nturns = "replay"')
    write_budget(pytester_env, text)
    result = pytester_env.runpytest("--specbound-hw=h100", "--specbound-samples=4",
                                    "--specbound-json=r.json")
    out = result.stdout.str()
    # said when the class is planned, before a request is sent, and again in the summary
    assert out.count("gate.toml::chat prompts: earlier turns replayed before each measured "
                     "request: 2.00 unmeasured generations per request on average") == 2, out
    assert out.index("prompts: earlier turns") < out.index("specbound summary")
    (r,) = json.loads((pytester_env.path / "r.json").read_text())["results"]
    assert r["workload"]["unmeasured_per_request"] == 2 and r["workload"]["turns"] == "replay"
    streamed = [q["body"] for q in fake_vllm.requests
                if q["path"].endswith("completions") and q["body"].get("stream")]
    assert streamed and all(b["messages"][-1]["content"] == "Why?" for b in streamed)


def test_random_prompts_without_a_tokenize_route_are_estimates(pytester_env, fake_vllm):
    text = budget_text(fake_vllm.url, accept="[1, 5]", min_eff=0.01).replace(
        'prompts = "chat"\nmax_tokens = 41',
        "prompts = {random = {input = 200, output = 41, prefix = 20}}")
    write_budget(pytester_env, text)
    result = pytester_env.runpytest("--specbound-hw=h100", "--specbound-samples=4",
                                    "--specbound-json=r.json")
    out = result.stdout.str()
    assert "random prompts of 200 tokens after a shared prefix of 20, 41 out" in out, out
    (r,) = json.loads((pytester_env.path / "r.json").read_text())["results"]
    w = r["workload"]
    assert not w["exact"] and "the server has no tokenize route" in w["tokenizer"]
    assert all(abs(c - a) <= 0.05 * a for a, c in zip(w["asked_input_tokens"],
                                                       w["counted_input_tokens"], strict=True))
    sent = [q["body"] for q in fake_vllm.requests if q["path"] == "/v1/completions"]
    assert sent and all(len(b["prompt"]) >= 4 * 200 for b in sent)
