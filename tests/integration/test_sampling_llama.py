"""Sampling on a real llama-server with n-gram speculation: greedy against temperature 0.7 on
the same prompts, each accept length from llama-server's own draft counters, and through the
plugin a class that samples says so in its results."""

from __future__ import annotations

import json

import pytest

from pytest_specbound.measure.prompts import load_prompts
from pytest_specbound.measure.sampler import FixedCount, Sampler, Stopping, Workload, measure
from pytest_specbound.serving.backends.base import Sampling
from pytest_specbound.serving.backends.llamacpp import LlamaCpp
from tests.conftest import PYTESTER_INI
from tests.integration.budgets import llama_budget

pytestmark = pytest.mark.integration
NGRAM = ("--spec-type", "ngram-mod")  # drafts on both (ngram-simple drafts nothing greedy here)


def run_ngram_class(pytester, srv, gguf_models, name: str, coding: str,
                    prompts: str | None = None):
    """``budgets/NAME.toml``: the n-gram budget's coding class with ``coding`` (and another
    prompt set), run against ``srv``; (the run's output, the class's result)."""
    pytester.makeini(PYTESTER_INI)
    (pytester.path / "budgets").mkdir(exist_ok=True)
    text = llama_budget(gguf_models["target"], gguf_models["draft"], coding) \
        .replace('method = "draft"', 'method = "ngram"')
    if prompts:
        text = text.replace('prompts = "coding"', f'prompts = "{prompts}"')
    (pytester.path / "budgets" / f"{name}.toml").write_text(text)
    out = pytester.runpytest_subprocess("--specbound-hw=cpu", f"--specbound-url={srv.url}",
                                        "budgets/", "--specbound-json=r.json", timeout=300)
    (r,) = json.loads((pytester.path / "r.json").read_text())["results"]
    return out, r


def test_sampling_lowers_the_ngram_accept_and_each_is_the_servers_own(launch_llama):
    srv = launch_llama("target", *NGRAM)
    found = {}
    for name, sampling in (("greedy", Sampling()), ("sampled", Sampling(0.7, seed=3))):
        sampler = Sampler(srv.endpoint, LlamaCpp(), sampling=sampling, drafting=True)
        m = measure(sampler, Workload(load_prompts("repetitive"), 256, warmup=1),
                    Stopping(FixedCount(8)))
        assert not m.failures
        # llama-server's own counters: draft_n / draft_n_accepted per request, left out of a
        # request in which it drafted nothing (every step then verified one token): on a
        # server that drafts, that is the server's word for accept 1 (7 of the 16 here)
        for r in m.timed:
            assert r.accept_source == "server", r
            if "draft_n" not in r.server["timings"]:
                assert r.accept_length == 1.0 and r.verify_steps == r.decode_tokens, r
        found[name] = m.accept_length
    # measured here: greedy 1.40, sampled 1.00 (a random model's greedy output falls into loops
    # n-gram lookup then predicts; sampling at 0.7 from its flat distribution does not)
    assert found["greedy"] > 1.1 and found["sampled"] < found["greedy"] - 0.1, found


def test_a_sampled_class_says_how_it_sampled(pytester, launch_llama, gguf_models):
    srv = launch_llama("target", *NGRAM)
    out, r = run_ngram_class(pytester, srv, gguf_models, "s", "max_tokens = 96\ntemperature = "
                             "0.7\ntop_p = 0.95\nseed = 3\nsamples = 8")
    assert r["sampling"] == {"temperature": 0.7, "top_p": 0.95, "seed": 3}
    assert "s.toml::coding (temperature 0.7, top_p 0.95, seed 3)" in out.stdout.str()


def test_an_mt_bench_file_by_category_runs_two_turns(pytester, launch_llama, gguf_models):
    """Each question's first turn is answered by the server, unmeasured; the second turn is
    sent with that answer and measured: its prompt holds both turns and the answer."""
    srv = launch_llama("target", *NGRAM)
    (pytester.path / "budgets").mkdir()
    questions = [{"question_id": i, "category": cat, "turns": [first, "Now say it again, shorter."]}
                 for i, (cat, first) in enumerate([("writing", "Write a short poem about the sea."),
                                                   ("writing", "Describe a quiet city morning."),
                                                   ("math", "What is 12 times 12?")])]
    (pytester.path / "budgets" / "mt.jsonl").write_text(
        "\n".join(json.dumps(q) for q in questions))
    out, r = run_ngram_class(pytester, srv, gguf_models, "mt",
                             'category = "writing"\nmax_tokens = 48\nsamples = 4', "mt.jsonl")
    assert r["verdict"] == "pass", out.stdout.str()
    single = []
    for q in questions[:2]:  # the first turn alone, as the server counts its prompt
        from pytest_specbound.serving.backends.base import Prompt
        from pytest_specbound.serving.backends.llamacpp import LlamaCpp

        path, body = LlamaCpp().build_request(
            Prompt(messages=({"role": "user", "content": q["turns"][0]},)), 1, None)
        single.append(srv.endpoint.post_json(path, body | {"stream": False})
                      ["usage"]["prompt_tokens"])
    for q in r["requests"]:  # turn 2: both user turns and a 48-token answer in its prompt
        assert q["prompt_tokens"] > min(single) + 48, (q["prompt_tokens"], single)


def test_output_lengths_drawn_per_request_are_what_each_request_got(pytester, launch_llama,
                                                                     gguf_models):
    """``max_tokens`` as a distribution: request i asks for draw i of the class's seeded
    generator, and llama-server (ignore_eos) returns exactly that many tokens."""
    from pytest_specbound.measure.lengths import OutputLengths, class_seed

    srv = launch_llama("target", *NGRAM)
    out, r = run_ngram_class(pytester, srv, gguf_models, "o", 'max_tokens = {distribution = '
                             '"uniform", min = 16, max = 96}\nsamples = 8')
    assert r["output_lengths"] == {"distribution": "uniform", "mean": 56.0,
                                   "stdev": pytest.approx(23.09, abs=0.01), "min": 16,
                                   "max": 96}, out.stdout.str()
    got = [q["completion_tokens"] for q in r["requests"]]
    drawn = OutputLengths.from_table({"distribution": "uniform", "min": 16, "max": 96}).draw(
        len(got), class_seed("o.toml::coding"))
    assert got == drawn and len(set(got)) > 3, (got, drawn)
