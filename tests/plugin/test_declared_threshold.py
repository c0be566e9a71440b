"""A threshold is one declaration: a conftest declares ``max_ttft_p99_ms`` (its key, test,
evaluator, reason code, SLO and summary line, in one ``Spec``) and a budget that sets it has it
parsed, tested, judged and printed, in the results JSON and the summary, with no other file
changed."""

from __future__ import annotations

import json

import pytest

from tests.plugin.conftest import budget_text
from tests.servers.fake import FakeServer, Script

# The one declaration, as a team's conftest (or a plugin's module) writes it.
CONFTEST = '''
import math

from pytest_specbound.gate.verdicts.evaluate import Evaluation, side_of
from pytest_specbound.gate.verdicts.thresholds import Spec, declare
from pytest_specbound.measure.proportion import decide_tpot, percentile, request_ttft_s
from pytest_specbound.measure.sequential import Metric, Side, Threshold

KEY = "max_ttft_p99_ms"
TTFT_P99 = Threshold("ttft_p99_ms", Metric.TTFT_MS, floor=False, label="TTFT p99 ms")


def ttfts(m):
    return [request_ttft_s(r) * 1e3 for r in m.timed]


def test(cls, m, value, alpha, resolution, min_n):  # 99% of requests within the limit
    return decide_tpot(ttfts(m), value, 0.99, alpha, resolution, min_n=min_n)


def evaluate(c):
    limit, p99 = c.limits[KEY], percentile(ttfts(c.m), 0.99)
    shown = f"TTFT p99 {p99:.1f} ms" if p99 is not None else "TTFT p99 -"
    side, evidence = side_of(TTFT_P99, p99 if p99 is not None else math.inf, limit, c.decisions)
    return Evaluation(side, "system", "ttft_p99_above_max" if side == Side.BAD else None,
                      (f"{shown} > {KEY} {limit:g}",) if side == Side.BAD else (),
                      f"{shown} vs max {limit:g}" if side == Side.UNSURE else None, evidence)


def report(value, r, limits):
    return f"TTFT p99 {r.ttft_ms.p99:.1f} ms (<= {value:g})"


declare(Spec(KEY, (TTFT_P99,), evaluate, share=test, report=report,
             met=lambda r, limit: request_ttft_s(r) * 1e3 <= limit))
'''


def run(pytester: pytest.Pytester, url: str, extra: str) -> tuple[pytest.RunResult, dict | None]:
    pytester.makeconftest(CONFTEST)
    (pytester.path / "budgets").mkdir(exist_ok=True)
    (pytester.path / "budgets" / "b.toml").write_text(
        budget_text(url=url, accept="[2.0, 4.0]", min_eff=0.01, extra=extra))
    result = pytester.runpytest_subprocess("--specbound-hw=h100", "budgets", "-p", "no:randomly",
                                           "--specbound-json=r.json", f"--rootdir={pytester.path}")
    out = pytester.path / "r.json"
    return result, json.loads(out.read_text()) if out.is_file() else None


def test_a_threshold_declared_in_a_conftest_is_parsed_judged_and_printed(pytester_env):
    # the fake answers its first token after 10 ms: far within 5 s, far beyond 1 ms
    with FakeServer("vllm", Script(step_s=0.007, ttft_s=0.01)) as srv:
        within, doc = run(pytester_env, srv.url, "max_ttft_p99_ms = 5000\nmin_goodput = 0.5")
        assert within.ret == 0, within.stdout.str()
        assert doc is not None
        r = doc["results"][0]
        assert r["max_ttft_p99_ms"] == 5000 and r["tests"]["ttft_p99_ms"]["side"] == "ok", r
        assert r["goodput"] == 1.0  # the declared SLO counts toward goodput
        assert "TTFT p99 " in within.stdout.str() and "(<= 5000)" in within.stdout.str()
        beyond, doc = run(pytester_env, srv.url, "max_ttft_p99_ms = 1")
        assert beyond.ret == 1 and doc is not None
        r = doc["results"][0]
        assert r["verdict"] == "fail" and r["reasons"][0] == "ttft_p99_above_max", r["reasons"]
        assert "> max_ttft_p99_ms 1" in beyond.stdout.str()
        # the parser checks it as it checks every threshold: a negative limit names the key
        bad, _ = run(pytester_env, srv.url, "max_ttft_p99_ms = -3")
    text = bad.stdout.str() + bad.stderr.str()
    assert bad.ret != 0 and "max_ttft_p99_ms" in text and "Traceback" not in text, text


def test_a_key_already_declared_is_refused_and_a_module_imported_again_replaces_its_own():
    from pytest_specbound.gate.verdicts.thresholds import SPECS, Spec, by_key, declare, withdraw
    from pytest_specbound.measure.sequential import Metric, Threshold

    with pytest.raises(ValueError, match="'min_tok_s' is already declared"):
        declare(Spec("min_tok_s", SPECS[2].tests, None))
    mine = Threshold("queue_ms", Metric.TTFT_MS, floor=False)

    def evaluate(c):  # the same function, as a conftest imported twice defines it twice
        return None

    try:
        first = declare(Spec("max_queue_ms", (mine,), evaluate))
        second = declare(Spec("max_queue_ms", (mine,), evaluate, high=100))
        assert by_key()["max_queue_ms"] is second is not first and len(SPECS) == 8
        with pytest.raises(ValueError, match="'max_queue_ms' is already declared"):
            declare(Spec("max_queue_ms", (Threshold("other", Metric.TTFT_MS),), lambda c: None))
    finally:
        withdraw("max_queue_ms")
    assert "max_queue_ms" not in by_key()
