"""Drift between the twin and its class, through the plugin on protocol-faithful vLLM servers
attached by url: the twin slowed while its class runs (a box that got busier, or quieter) is
measured again after the class, the move named in the verdict, and a cost per draft forward
below zero carries why it is not physics."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from tests.plugin.conftest import budget_text
from tests.servers.fake import FakeServer, Script


@contextmanager
def servers(first_step_s: float, later_step_s: float) -> Iterator[tuple[FakeServer, FakeServer]]:
    """A speculative server (4 tokens per 7 ms round) and a plain one whose round takes
    ``first_step_s`` until the speculative server's first request, ``later_step_s`` after."""
    with FakeServer("vllm", Script(step_s=0.007)) as spec, \
            FakeServer("vllm", Script(steps=[1] * 40, step_s=first_step_s,
                                      per_request_metrics=False)) as plain:
        done = threading.Event()

        def switch() -> None:
            while not done.is_set() and not spec.requests:
                time.sleep(0.002)
            plain.script.step_s = later_step_s

        watcher = threading.Thread(target=switch, daemon=True)
        watcher.start()
        try:
            yield spec, plain
        finally:
            done.set()
            watcher.join()


def run(pytester: pytest.Pytester, spec: FakeServer, plain: FakeServer,
        twin: str = "") -> tuple[pytest.RunResult, dict]:
    text = budget_text(url=spec.url, extra="samples = 8") \
        + f'\n[no_speculation]\nurl = "{plain.url}"\n{twin}\n'
    (pytester.path / "budgets").mkdir(exist_ok=True)
    (pytester.path / "budgets" / "b.toml").write_text(text)
    out = pytester.runpytest_subprocess("--specbound-hw=h100", "budgets", "-p", "no:randomly",
                                        "--specbound-json=r.json", "-rA")
    return out, json.loads((pytester.path / "r.json").read_text())["results"][0]


def test_a_twin_that_sped_up_after_its_first_block_is_named_not_a_negative_cost(pytester_env):
    """The twin ran at 14 ms a round before the class and 5 ms after it: the check after the
    class measures the move, the verdict names it, and the cost per draft forward (below zero
    against the pooled blocks) says it is the box, not the engine."""
    with servers(0.014, 0.005) as (spec, plain):
        out, r = run(pytester_env, spec, plain)
    text = out.stdout.str()
    base, cost = r["base"], r["draft_step_ms"]
    assert base["rechecked"] is True and base["drift"]["seen"] is True, base
    assert base["drift"]["after"] == 4 and base["n"] == base["drift"]["before"] + 4
    assert base["drift"]["low"] > 0.5, base["drift"]  # 14 ms -> 5 ms: +180%
    assert "drift" in r["reasons"]
    assert any(x.startswith("drift: the twin's rate moved +") for x in r["text"]), r["text"]
    assert "the twin's rate moved between its blocks before and after the class" in text
    assert cost["ms"] < 0 and "below zero, not physics" in cost["why"], cost
    assert "the box's speed moved while it was measured" in cost["why"]
    assert "engine cost per draft forward above the roofline" in text and "not physics" in text
    assert "without speculation again (the drift check, 4 requests)" in text
    assert "Traceback" not in text


def test_a_steady_twin_is_checked_and_nothing_is_said(pytester_env):
    """The same twin at 5 ms before and after: checked, no drift seen, no note, a positive cost."""
    with servers(0.005, 0.005) as (spec, plain):
        out, r = run(pytester_env, spec, plain)
    base = r["base"]
    assert out.ret == 0, out.stdout.str()
    assert base["rechecked"] is True and base["drift"]["seen"] is False, base
    assert "drift" not in r["reasons"] and not any("drift" in x for x in r["text"]), r["text"]
    assert "why" not in r["draft_step_ms"], r["draft_step_ms"]


def test_without_the_check_a_negative_cost_says_what_was_not_measured(pytester_env):
    """recheck = 0: the twin measured only before the class; the cost below zero says the
    twin was not checked after it, and how to check it."""
    with servers(0.014, 0.005) as (spec, plain):
        out, r = run(pytester_env, spec, plain, twin="recheck = 0")
    base, cost = r["base"], r["draft_step_ms"]
    assert base["rechecked"] is False and base["drift"] is None, base
    assert cost["ms"] < 0 and "no check after it" in cost["why"], cost
    assert "[no_speculation] recheck" in cost["why"]
    assert "without speculation again" not in out.stdout.str()
