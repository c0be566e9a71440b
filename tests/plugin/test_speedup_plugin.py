"""Speculation against none through the plugin, on protocol-faithful vLLM servers launched as
``vllm serve`` (a shim named vllm): the twin derived from the launch command, measured first,
each server launched once, the speedup in the table and JSON, and ``min_speedup`` failing as
its own diagnosis."""

from __future__ import annotations

import json
import stat
from pathlib import Path

import pytest

from tests.plugin.conftest import PY, ROOT, budget_text
from tests.servers.fake import FakeServer, Script

SPEC = '{"method": "eagle3", "num_speculative_tokens": 3}'


def vllm_shim(folder: Path, launches: Path) -> Path:
    """An executable named ``vllm``: ``vllm serve MODEL ARGS`` runs the fake vLLM server, with
    speculation only when ``--speculative-config`` is among ARGS; each server logs its requests
    ('plain PATH' or 'spec PATH') to ``requests-PID.txt`` beside ``launches``."""
    shim = folder / "bin" / "vllm"
    shim.parent.mkdir(exist_ok=True)
    shim.write_text(f"#!/bin/sh\nshift 2\ncd {ROOT}\nexec {PY} -m tests.servers.fake --family vllm "
                    f"--plain-unless-speculative --step-s 0.007 --launches {launches} "
                    f"--request-log {launches.parent}/requests-$$.txt \"$@\"\n")
    shim.chmod(shim.stat().st_mode | stat.S_IEXEC)
    return shim


def write_budget(pytester: pytest.Pytester, extra: str = "", twin: str = "[no_speculation]\n",
                 classes: str = "") -> Path:
    shim = vllm_shim(pytester.path, pytester.path / "launches.txt")
    launch = f"{shim} serve test-model --speculative-config '{SPEC}' --port {{port}}"
    # min_eff well below the fake's 0.78: one class runs at concurrency 2, where a loaded runner
    # slows the fake's threads (the speedup is the subject here)
    text = budget_text(launch=launch.replace("'", '"'), min_eff=0.3, extra=extra) + classes + \
        "\n" + twin
    text = text.replace(f"launch = '{launch.replace(chr(39), chr(34))}'",
                        f"launch = '''{launch}'''")
    budgets = pytester.path / "budgets"
    budgets.mkdir(exist_ok=True)
    path = budgets / "b.toml"
    path.write_text(text)
    return path


def run(pytester: pytest.Pytester, *args: str) -> tuple[pytest.RunResult, dict]:
    out = pytester.runpytest_subprocess("--specbound-hw=h100", "budgets",
                                        "--specbound-json=r.json", "-p", "no:randomly", *args)
    return out, json.loads((pytester.path / "r.json").read_text())


def test_derived_twin_measured_once_and_speedup_reported(pytester_env):
    write_budget(pytester_env, classes="\n[classes.code]\nprompts = \"coding\"\nmax_tokens = 41\n"
                 "concurrency = [1, 2]\n")
    out, data = run(pytester_env)
    assert out.ret == 0, out.stdout.str()
    text = out.stdout.str()
    # the twin's command is shown: the launch without --speculative-config
    line = next(x for x in text.splitlines() if "without speculation:" in x and "serve" in x)
    assert "--speculative-config" not in line and "test-model" in line
    assert "speedup [interval]" in text
    results = data["results"]
    assert len(results) == 3
    for r in results:
        lo, hi = r["speedup_bounds"]
        # fake: 4 tokens per 7 ms step with speculation, 1 per 5.6 ms without: 3.2x
        assert 2.6 < r["speedup"] < 3.8 and lo < r["speedup"] < hi
        assert r["base"]["command"] and "--speculative-config" not in r["base"]["command"]
        assert r["base_decode_tok_s"] == pytest.approx(r["base"]["decode_tok_s"])
        assert r["draft_step_ms"]["forwards"] == 3 and r["draft_step_ms"]["measured"] is True
    # each server launched once: one speculative, one without, for three classes and levels
    pids = (pytester_env.path / "launches.txt").read_text().split()
    assert len(pids) == 2, pids


def test_min_speedup_far_above_the_truth_fails_as_speculation(pytester_env):
    write_budget(pytester_env, extra="min_speedup = 8.0", twin="")
    out, data = run(pytester_env)
    assert out.ret == 1
    r = data["results"][0]
    assert r["verdict"] == "fail" and r["diagnosis"] == "speculation"
    assert "speedup_below_min" in r["reasons"]
    assert any(t.startswith("speculation does not pay at c1: ") and "< min_speedup 8x" in t
               for t in r["text"]), r["text"]
    assert r["tests"]["speedup"]["side"] == "bad"


def test_speedup_switch_turns_the_twin_on_for_every_budget(pytester_env):
    write_budget(pytester_env, twin="")
    out, data = run(pytester_env)
    assert data["results"][0]["speedup"] is None  # not asked for
    out, data = run(pytester_env, "--specbound-speedup")
    assert out.ret == 0, out.stdout.str()
    assert data["results"][0]["speedup"] > 2


def test_an_attached_server_without_a_twin_url_is_one_setup_line(pytester_env, fake_vllm):
    budgets = pytester_env.path / "budgets"
    budgets.mkdir()
    (budgets / "b.toml").write_text(budget_text(url=fake_vllm.url, extra="min_speedup = 1.5"))
    out = pytester_env.runpytest_subprocess("--specbound-hw=h100", "budgets", "-p", "no:randomly")
    assert out.ret == 1
    assert ("b.toml:10: server: the server is attached by url, so its twin without speculation "
            "cannot be derived: give [no_speculation] url (or launch)\n") in out.stdout.str()
    assert "Traceback" not in out.stdout.str()


def test_a_wrapper_script_asks_for_the_twin_launch(pytester_env):
    budgets = pytester_env.path / "budgets"
    budgets.mkdir()
    (budgets / "b.toml").write_text(budget_text(launch="./serve.sh --port {port}") +
                                    "\n[no_speculation]\n")
    out = pytester_env.runpytest_subprocess("--specbound-hw=h100", "budgets", "-p", "no:randomly")
    assert out.ret == 1
    text = out.stdout.str()
    assert ("server.launch: cannot derive a server without speculation: the launch command does "
            "not run vllm or vllm.entrypoints itself (a wrapper's flags are not known); give the "
            "server without speculation as [no_speculation] launch (or url)\n") in text
    assert "Traceback" not in text


def test_a_marker_with_min_speedup_measures_its_twin(pytester_env, fake_vllm):
    """A marker's class, attached to a speculative server by url, with a twin by url: the
    speedup measured there, and min_speedup decided against it."""
    with FakeServer("vllm", Script(steps=[1] * 40, step_s=0.0056,
                                   per_request_metrics=False)) as plain:
        pytester_env.makepyfile(f"""
import pytest

SERVER = {{"url": "{fake_vllm.url}", "backend": "vllm", "model_id": "test-model"}}

@pytest.mark.specbound(prompt_class="chat", model="llama-3.1-8b", speculative="eagle3:3",
                       max_tokens=41, server=SERVER, min_speedup=1.5,
                       no_speculation={{"url": "{plain.url}"}})
def test_pays(specbound_measure, specbound_check):
    result = specbound_measure()
    assert result.speedup > 2 and result.base["n"] >= 4
    specbound_check(result)

@pytest.mark.specbound(prompt_class="chat", model="llama-3.1-8b", speculative="eagle3:3",
                       max_tokens=41, server=SERVER, min_speedup=9,
                       no_speculation={{"url": "{plain.url}"}})
def test_does_not_pay(specbound_measure, specbound_check):
    specbound_check(specbound_measure())
""")
        result = pytester_env.runpytest_subprocess("--specbound-hw=h100", "-p", "no:randomly")
    result.assert_outcomes(passed=1, failed=1)
    out = result.stdout.str()
    assert "speculation does not pay at c1: " in out and "< min_speedup 9x" in out
    assert "Traceback" not in out


def twin_requests(folder: Path) -> int:
    """Requests the servers without speculation received, from the servers' own logs."""
    return sum(line.startswith("plain ") for log in folder.glob("requests-*.txt")
               for line in log.read_text().splitlines())


def test_each_twin_is_measured_once_under_xdist(pytester_env):
    """Two classes with a twin each, two workers: the first worker to need the bases measures
    them and leaves them in the run's folder; the other reads them. The twin server receives
    one measurement's requests per class (samples plus the warm-up), not one per worker."""
    write_budget(pytester_env, classes="\n[classes.code]\nprompts = \"coding\"\nmax_tokens = 41\n")
    out, data = run(pytester_env, "-n", "2", "--specbound-samples=6",
                    "--specbound-min-samples=6", "--specbound-warmup=1")
    assert out.ret == 0, out.stdout.str()
    assert {r["class"] for r in data["results"]} == {"chat", "code"}
    assert all(r["base"]["n"] == 6 and r["speedup"] > 1 for r in data["results"]), data
    assert twin_requests(pytester_env.path) == 2 * (6 + 1), sorted(
        p.name for p in pytester_env.path.glob("requests-*.txt"))
