"""Pinned acceptance on a real llama-server: the plugin launches the budget's server twice, as
written for the drafter's class and with ``--spec-synth-rates`` for the pinned class, and the
pinned class measures its accept at the pin."""

from __future__ import annotations

import json
import shlex

import pytest

from tests.conftest import PYTESTER_INI
from tests.integration.budgets import llama_budget

pytestmark = pytest.mark.integration


def test_a_pinned_class_measures_its_accept_at_the_pin(pytester, llama_server_bin, gguf_models):
    launch = (f'launch = "{llama_server_bin} -m {gguf_models["target"]} -md '
              f'{gguf_models["draft"]} --spec-type draft-simple --spec-draft-n-max 3 '
              '--host {host} --port {port} -t 1 -c 4096 -np 1 --metrics"')
    text = llama_budget(gguf_models["target"], gguf_models["draft"],
                        "max_tokens = 96\naccept = [1.0, 4.0]\nsamples = 6", server=launch)
    text += ('\n[classes.system]\nprompts = "coding"\nmax_tokens = 96\npin_accept = 2.5\n'
             "min_efficiency = 0.01\nsamples = 12\n")
    pytester.makeini(PYTESTER_INI)
    (pytester.path / "budgets").mkdir()
    (pytester.path / "budgets" / "llama.toml").write_text(text)
    out = pytester.runpytest_subprocess("--specbound-hw=cpu", "budgets/", "--specbound-json=r.json",
                                        "--specbound-min-samples=12", timeout=600)
    stdout = out.stdout.str()
    assert out.ret == 0, stdout
    results = {r["class"]: r for r in json.loads((pytester.path / "r.json").read_text())["results"]}
    system, drafter = results["system"], results["coding"]
    argv = shlex.split(system["command"])
    assert argv[argv.index("--spec-synth-rates") + 1] == "1,0.5,0", system["command"]
    assert "--spec-synth" not in drafter["command"] and drafter["pin_accept"] is None
    assert system["pin_accept"] == 2.5 and system["accept_source"] == "server"
    assert abs(system["accept_length"] - 2.5) <= 0.1, system["accept_length"]
    assert "pinned" in system["reasons"], system["text"]
    assert any(t.startswith("pinned: accept ") and t.endswith("its band is judged in coding")
               for t in system["text"]), system["text"]
    assert "(pinned 2.5)" in stdout
    # the real drafter (random weights) accepts what it accepts; its band is judged, unpinned
    assert drafter["tests"]["accept_low"]["side"] == "ok", drafter["tests"]
    per_request = [q["accept_length"] for q in system["requests"] if q.get("accept_length")]
    assert len(per_request) >= 12 and max(per_request) - min(per_request) < 0.5, per_request
