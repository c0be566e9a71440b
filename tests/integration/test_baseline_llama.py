"""Against the last accepted run on a real llama-server (the CPU demo's models): a second run
of the same server passes against the first; the same budget against the server with fewer
threads (about half the rate) fails as ``regressed`` naming the system; with half the synthetic
accept, the drafter. The resolution (30%) is twice the drift this shared box showed between runs.
Then ``specbound compare`` and ``specbound history`` read the runs."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from pytest_specbound.serving.server import LaunchSpec, Server, start_server
from tests.conftest import PYTESTER_INI
from tests.integration.budgets import llama_budget

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def demo_server(llama_server_bin: str, tmp_path_factory: pytest.TempPathFactory
                ) -> Iterator[Callable[[int, float], Server]]:
    """``demo_server(threads, synthetic_accept)``: one llama-server at a time on the demo models
    (the one before is stopped: two would share the two cores)."""
    from pytest_specbound.physics.demo import demo_models

    models = demo_models()
    logs = tmp_path_factory.mktemp("logs")
    running: dict[tuple[int, float], Server] = {}

    def launch(threads: int, synth: float) -> Server:
        if (threads, synth) not in running:
            for server in running.values():
                server.stop()
            running.clear()
            argv = [llama_server_bin, "-m", models["demo_gguf"], "-md", models["demo_draft_gguf"],
                    "--spec-type", "draft-simple", "--spec-draft-n-max", "3", "--spec-synth-len",
                    str(synth), "--host", "{host}", "--port", "{port}", "-t", str(threads),
                    "-c", "4096", "-np", "1", "--metrics"]
            running[(threads, synth)] = start_server(LaunchSpec(argv), ("/health",), 120, logs,
                                                     name="llama-demo")
        return running[(threads, synth)]

    yield launch
    for server in running.values():
        server.stop()


def run(pytester: pytest.Pytester, server: Server, out: str, *args: str) -> dict:
    from pytest_specbound.physics.demo import demo_models

    models = demo_models()
    pytester.makeini(PYTESTER_INI)
    (pytester.path / "budgets").mkdir(exist_ok=True)
    (pytester.path / "budgets" / "demo.toml").write_text(llama_budget(
        Path(models["demo_gguf"]), Path(models["demo_draft_gguf"]),
        "max_tokens = 128\naccept = [1.2, 3.6]\nmin_efficiency = 0.01\nsamples = 48\n"
        "resolution = 0.3  # a shared 2-core CI box: 7-10% noise per request, and 13% seen\n"
        "# between two runs a minute apart; the machine's own drift must sit inside half of it\n"))
    result = pytester.runpytest_subprocess("--specbound-hw=cpu", f"--specbound-url={server.url}",
                                           "budgets/", f"--specbound-json={out}",
                                           "-p", "no:randomly", *args, timeout=600)
    doc = json.loads((pytester.path / out).read_text())
    return {"ret": result.ret, "out": result.stdout.str(), "result": doc["results"][0]}


def test_second_run_passes_fewer_threads_is_system_lower_accept_is_drafter(pytester,
                                                                           demo_server):
    first = run(pytester, demo_server(2, 3.0), "r1.json", "--specbound-until-precise")
    assert first["ret"] == 0, first["out"]
    assert first["result"]["baseline"] is None
    again = run(pytester, demo_server(2, 3.0), "r2.json", "--specbound-baseline=r1.json")
    r = again["result"]
    assert again["ret"] == 0, again["out"]
    assert r["baseline"]["decode"]["side"] == "ok" and "regressed" not in r["reasons"]
    change = r["baseline"]["decode_change"]  # what this machine did between the runs: reported
    assert change["low"] <= change["change"] <= change["high"], change
    assert "vs baseline run" in again["out"]

    slower = run(pytester, demo_server(1, 3.0), "r3.json", "--specbound-baseline=r1.json")
    r = slower["result"]
    assert slower["ret"] == 1 and "regressed" in r["reasons"], slower["out"]
    assert r["diagnosis"] == "system" and r["baseline"]["decode_change"]["change"] < -0.05
    assert any("the system slowed down" in t for t in r["text"]), r["text"]

    drafter = run(pytester, demo_server(2, 1.5), "r4.json", "--specbound-baseline=r1.json")
    r = drafter["result"]
    assert drafter["ret"] == 1 and "regressed" in r["reasons"], drafter["out"]
    assert r["diagnosis"] == "drafter", r["text"]
    assert any("the drafter (or the prompts) changed" in t for t in r["text"]), r["text"]

    cli = [sys.executable, "-m", "pytest_specbound.cli"]
    compare = subprocess.run([*cli, "compare", "r1.json", "r3.json", "--format", "json"],
                             cwd=pytester.path, capture_output=True, text=True, check=False)
    assert compare.returncode == 1, compare.stderr
    (row,) = json.loads(compare.stdout)["rows"]
    assert row["decision"] == "regressed" and row["decode_change"]["change"] < -0.05
    history = subprocess.run([*cli, "history", "r1.json", "r2.json", "r3.json", "--plot",
                              "trend.png"], cwd=pytester.path, capture_output=True, text=True,
                             check=False)
    assert history.returncode == 0, history.stderr
    assert "REGRESSED" in history.stdout.splitlines()[-1], history.stdout
    assert (pytester.path / "trend.png").stat().st_size > 10_000
