"""Two xdist workers never measure the same server at once (the measurement lock)."""

from __future__ import annotations

import json

import pytest

from tests.plugin.conftest import budget_text
from tests.servers.fake import FakeServer, Script

CLASSES = "".join(f"""
[classes.c{i}]
prompts = "chat"
max_tokens = 41
accept = [3.5, 4.0]
min_efficiency = 0.3
""" for i in range(4))


def run(pytester, srv, *args):
    text = budget_text(srv.url).split("[classes.chat]")[0] + CLASSES
    (pytester.path / "budgets").mkdir(exist_ok=True)
    (pytester.path / "budgets" / "gate.toml").write_text(text)
    out = pytester.path / f"r{len(args)}.json"
    result = pytester.runpytest_subprocess("--specbound-hw=h100", "--specbound-samples=6",
                                           f"--specbound-json={out}", *args)
    return result, {r["class"]: r for r in json.loads(out.read_text())["results"]}


def test_xdist_workers_take_turns_on_one_server(pytester_env, tmp_path, monkeypatch):
    pytest.importorskip("xdist")
    monkeypatch.setenv("SPECBOUND_LOCK_DIR", str(tmp_path / "locks"))
    with FakeServer("vllm", Script(step_s=0.004)) as srv:
        result, parallel = run(pytester_env, srv, "-n", "2")
        result.assert_outcomes(passed=4)
        assert srv.max_in_flight == 1  # four classes, two workers: never two requests at once
        srv.max_in_flight = 0
        result, serial = run(pytester_env, srv)
        result.assert_outcomes(passed=4)
        assert srv.max_in_flight == 1
    # the lock is what the server saw: never two requests in flight, with two workers or one.
    # Each class decodes the fake's scripted acceptance either way. (Their rates are not
    # compared: two runs a minute apart on a shared box, each beside whatever else the box ran,
    # read 500-600 and 850-1050 tok/s once on one core under an outer xdist run, the box's
    # difference, not the lock's.)
    for name, r in parallel.items():
        assert r["accept_length"] == serial[name]["accept_length"] == 4.0
        assert r["requests"] and serial[name]["requests"], name


def test_a_waiting_process_says_whom_it_waits_for(tmp_path):
    import threading

    from pytest_specbound.gate.pipeline.measure_lock import exclusive_measurement

    said: list[str] = []
    entered = threading.Event()
    release = threading.Event()

    def holder() -> None:
        with exclusive_measurement("http://gpu:8000", "budgets/a.toml::coding (pid 1)",
                                   folder=tmp_path):
            entered.set()
            release.wait(5)

    t = threading.Thread(target=holder)
    t.start()
    entered.wait(5)
    threading.Timer(0.3, release.set).start()
    with exclusive_measurement("http://gpu:8000", "b", said.append, folder=tmp_path) as waited:
        pass
    t.join()
    assert waited >= 0.25
    assert said and said[0].startswith("waiting for the server http://gpu:8000: measured by "
                                       "budgets/a.toml::coding (pid 1)")
