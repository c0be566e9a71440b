"""The server's own settings against the budget, with a real llama-server (launched and attached)."""

from __future__ import annotations

import json

import pytest

from tests.conftest import PYTESTER_INI
from tests.integration.budgets import llama_budget

pytestmark = pytest.mark.integration


def budget(gguf_models, server: str, steps: int = 3, extra: str = "") -> str:
    return llama_budget(gguf_models["target"], gguf_models["draft"],
                        "max_tokens = 64\naccept = [1.0, 4.0]\nmin_efficiency = 0.01\n"
                        f"samples = 4\n{extra}\n", steps=steps,
                        server=f"{server}\nready_timeout_s = 120")


def launch_line(llama_server_bin, gguf_models, n_max: int) -> str:
    return (f"launch = '{llama_server_bin} -m {gguf_models['target']} -md {gguf_models['draft']} "
            f"--spec-type draft-simple --spec-draft-n-max {n_max} --spec-synth-len 2.5 "
            "--host {host} --port {port} -t 1 -c 2048 -np 1 --metrics'")


def run(pytester, text: str, *args):
    pytester.makeini(PYTESTER_INI)
    (pytester.path / "budgets").mkdir(exist_ok=True)
    (pytester.path / "budgets" / "llama.toml").write_text(text)
    result = pytester.runpytest("--specbound-hw=cpu", "--specbound-json=r.json", "budgets/", *args)
    return result, json.loads((pytester.path / "r.json").read_text())["results"][0]


def test_draft_steps_that_differ_fail_naming_both(pytester, llama_server_bin, gguf_models):
    text = budget(gguf_models, launch_line(llama_server_bin, gguf_models, 3), steps=2)
    result, r = run(pytester, text)
    result.assert_outcomes(failed=1)
    out = result.stdout.str()
    assert "the server does not run what the budget describes" in out
    assert "budget says draft:2 (budgets/llama.toml:6: speculative.method); the server runs 3 " \
           "draft steps (launch: --spec-draft-n-max 3)" in out
    assert r["verdict"] == "error" and "setup" in r["reasons"]


def test_matching_settings_pass_and_are_recorded(pytester, llama_server_bin, gguf_models):
    text = budget(gguf_models, launch_line(llama_server_bin, gguf_models, 3), steps=3)
    result, r = run(pytester, text)
    result.assert_outcomes(passed=1)
    served = r["served"]
    assert served["speculative"] is True and served["draft_steps"] == 3
    assert served["slots"] == 1 and served["threads"] == 1 and served["dtype"] == "f16"
    assert served["sources"]["slots"] == "/props total_slots 1"  # the server's word first
    assert served["sources"]["speculative"] == "/slots speculative true"


def test_an_attached_server_without_a_drafter_is_named(pytester, launch_llama, gguf_models):
    plain = launch_llama("target")  # no -md: no speculation
    text = budget(gguf_models, f'url = "{plain.url}"')
    result, r = run(pytester, text)
    result.assert_outcomes(failed=1)
    assert "the server runs no speculation (/slots speculative false)" in result.stdout.str()
    assert r["verdict"] == "error" and "setup" in r["reasons"]


def test_more_concurrency_than_slots_names_the_slots(pytester, launch_llama, gguf_models):
    server = launch_llama("target", "--spec-synth-len", "2.5", draft=True)  # -np 1
    text = budget(gguf_models, f'url = "{server.url}"', extra="concurrency = [1, 4]")
    result, _ = run(pytester, text)
    result.assert_outcomes(passed=1, failed=1)
    assert "set it to at least 4 (it serves 1 at once: /props total_slots 1)" \
        in result.stdout.str()
