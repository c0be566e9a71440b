"""`specbound calibrate` proposes bands that the next run passes; `specbound report` merges runs."""

from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest

from pytest_specbound.gate.schema.budget import load_budget
from tests.integration.test_plugin_llama import budget

pytestmark = pytest.mark.integration


def test_calibrate_then_pass(pytester, launch_llama, gguf_models):
    server = launch_llama("target", "--spec-synth-len", "2.5", draft=True)
    path = pytester.path / "budgets" / "llama.toml"
    path.parent.mkdir()
    path.write_text("# reviewed in PRs\n" + budget(gguf_models["target"], gguf_models["draft"],
                                                     "[3.5, 4.0]  # old band", 0.99))
    proc = subprocess.run([sys.executable, "-m", "pytest_specbound.cli", "calibrate", str(path),
                           "--hw", "cpu", "--url", server.url, "--samples", "12", "--write"],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert "-accept = [3.5, 4.0]  # old band" in proc.stdout  # a reviewable diff
    new = load_budget(path).classes["coding"]
    assert new.accept[0] < 2.5 < new.accept[1] and new.accept[1] - new.accept[0] < 1.0
    assert 0 < new.limits.get("min_efficiency") < 0.99
    assert path.read_text().startswith("# reviewed in PRs\n") and "# old band" in path.read_text()
    # The budget calibrate wrote must not fail on the same server. Each threshold sits a
    # resolution outside the measured interval; tests/integration/test_sequential_llama.py shows
    # the pass rate on requests of the same minutes. Here a later run: this VM's speed moves by
    # 10-20% between minutes, which no budget written from one run can know, so the run is at
    # confidence 0.999 and an undecided verdict passes.
    # A fresh process, as calibrate ran and as users run pytest: the tiny model streams a token
    # every ~0.35 ms, so the client's own speed is part of the rate. Run in-process late in a
    # full test session this check once read 0.635 against a floor of 0.67 placed under
    # calibrate's interval (alone it passes); the two runs now stand on equal terms.
    result = pytester.runpytest_subprocess("--specbound-hw=cpu", f"--specbound-url={server.url}",
                                           "--specbound-json=a.json", "budgets/",
                                           "--specbound-confidence=0.999",
                                           "--specbound-inconclusive=pass", timeout=300)
    result.assert_outcomes(passed=1)
    doc = json.loads((pytester.path / "a.json").read_text())
    (pytester.path / "b.json").write_text(json.dumps({**doc, "results": [
        {**r, "hardware": "other-runner"} for r in doc["results"]]}))
    rep = subprocess.run([sys.executable, "-m", "pytest_specbound.cli", "report",
                          str(pytester.path / "a.json"), str(pytester.path / "b.json"),
                          "--format", "markdown"], capture_output=True, text=True)
    # report exits 1 for any verdict but pass or skip (an inconclusive one included)
    assert rep.returncode == (0 if all(r["verdict"] == "pass" for r in doc["results"]) else 1)
    assert "| llama.toml::coding | cpu |" in rep.stdout and "| other-runner |" in rep.stdout


def test_calibrate_proposes_per_level(pytester, launch_llama, gguf_models):
    server = launch_llama("target", "--spec-synth-len", "2.5", "-np", "4", "-c", "8192",
                          draft=True)
    path = pytester.path / "budgets" / "llama.toml"
    path.parent.mkdir()
    path.write_text(budget(gguf_models["target"], gguf_models["draft"], "[3.5, 4.0]", 0.99)
                    + "concurrency = [1, 4]\n\n[roofline]\nthreads = 1\n")
    proc = subprocess.run([sys.executable, "-m", "pytest_specbound.cli", "calibrate", str(path),
                           "--hw", "cpu", "--url", server.url, "--samples", "8", "--write"],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert "coding at concurrency 4: measured accept" in proc.stderr
    assert "proposed in [classes.coding.c4]: accept = [" in proc.stderr and "{" not in proc.stderr
    assert "+[classes.coding.c4]" in proc.stdout  # the new table is part of the diff
    coding = load_budget(path).classes["coding"]
    # each level's band holds what that level measured (the synthetic 2.5 is nominal: this
    # server realized 2.25-2.45 at one stream, so a band around it need not hold 2.5)
    measured = {int(level): float(accept) for level, accept in re.findall(
        r"coding at concurrency (\d+): measured accept ([0-9.]+)", proc.stderr)}
    assert set(measured) == {1, 4}, proc.stderr
    four = coding.at(4)
    assert four.accept[0] < measured[4] < four.accept[1], (four.accept, measured)
    assert 0 < four.limits.get("min_efficiency") < 0.99
    assert coding.at(1).accept[0] < measured[1] < coding.at(1).accept[1], measured
    assert 2.0 < measured[1] < 3.0 and 2.0 < measured[4] < 3.0, measured  # near the synthetic
