"""The plugin's extension points, as a user's conftest uses them: a comparison against a second
server is one module (a reference and its comparison) plus one registration in the
``pytest_specbound_add_references`` hook; the run's identity and the results JSON take users'
additions through ``pytest_specbound_update_identity`` and ``pytest_specbound_update_json``."""

from __future__ import annotations

import json

import pytest

from tests.plugin.conftest import budget_text
from tests.servers.fake import FakeServer, Script

# The one module: what a team would write to compare each class with another server (another
# engine or release on the same hardware). It measures the class there once per run (through
# the run's store, so once across xdist workers too) and compares per-user decode rates.
OTHER_SERVER = '''
from dataclasses import dataclass, field, replace

from pytest_specbound.errors import ServerError
from pytest_specbound.gate.pipeline.plan import plan_class
from pytest_specbound.gate.pipeline.ready import ready_server
from pytest_specbound.gate.pipeline.runner import Hooks, judge_class, measure_class
from pytest_specbound.gate.references.against_twin import twin_sample
from pytest_specbound.gate.references.store import ReferenceStore
from pytest_specbound.gate.verdicts.evaluate import Evaluation
from pytest_specbound.measure.sequential import Side
from pytest_specbound.measure.speedup import Sample, spec_rates, speedup


@dataclass(frozen=True)
class AgainstOther:
    sample: Sample
    minimum: float
    precise: bool = False

    def limits(self, limits):
        return []

    def decide(self, t, m, alpha, resolution, min_n):
        raise AssertionError("adds no sequential test")

    def evaluate(self, c):
        s = speedup(spec_rates(c.m), self.sample, c.level)
        if s is None:
            return None
        line = f"{s.estimate:.2f}x [{s.low:.2f}, {s.high:.2f}] the other server's decode"
        if s.high < self.minimum:
            return Evaluation(Side.BAD, "system", "regressed", (f"{line} < {self.minimum}x",))
        return Evaluation(Side.OK, "system", notes=(f"note: {line}",))

    def annotate(self, result, roof, m, level):
        s = speedup(spec_rates(m), self.sample, level)
        mine = {"decode_tok_s": round(self.sample.decode_tok_s, 2), "n": self.sample.n,
                "ratio": round(s.estimate, 4) if s else None}
        return replace(result, compared={**result.compared, "other_server": mine})


@dataclass
class OtherServer:
    run: object
    url: str
    minimum: float
    found: dict = field(default_factory=dict)

    def __post_init__(self):
        self.store = ReferenceStore(self.run.pool.shared_dir, "other-server")

    def wants(self, budget, name):
        return True

    def prepare(self, wanted):
        with self.store.held():
            for budget, name, level in wanted:
                key = (str(budget.path), name, level)
                found = self.store.load(key)
                if found is None:
                    cls = budget.classes[name].without_limits()
                    other = replace(budget, server=replace(budget.server, url=self.url))
                    plan = plan_class(other, cls, self.run.hw, self.run.settings, level)
                    found = judge_class(plan, measure_class(
                        plan, ready_server(plan, self.run.pool), Hooks()))
                    self.store.save(key, found)
                self.found[key] = found

    def comparison(self, plan):
        found = self.found.get((str(plan.budget.path), plan.cls.name, plan.concurrency))
        if found is None or not found.timed:
            raise ServerError("the other server measured nothing")
        return AgainstOther(twin_sample(found), self.minimum)

    def recheck_requests(self, plan):
        return 0

    def recheck(self, plan, requests, level):
        return self.comparison(plan)
'''

CONFTEST = '''
import os

from other_server import OtherServer


def pytest_specbound_add_references(config, references):
    references["other_server"] = lambda run: OtherServer(
        run, os.environ["OTHER_URL"], float(os.environ["OTHER_MIN"]))


def pytest_specbound_update_identity(config, identity):
    identity["runner"] = "runner-7"


def pytest_specbound_update_json(config, output_json):
    output_json["team"] = {"owner": "inference"}
'''


def run(pytester: pytest.Pytester, url: str, other: str, minimum: float) -> tuple[int, dict, str]:
    pytester.makepyfile(other_server=OTHER_SERVER)
    pytester.makeconftest(CONFTEST)
    (pytester.path / "budgets").mkdir(exist_ok=True)
    (pytester.path / "budgets" / "b.toml").write_text(
        budget_text(url=url, accept="[2.0, 4.0]", min_eff=0.01))
    result = pytester.runpytest_subprocess(
        "--specbound-hw=h100", "budgets", "-p", "no:randomly", "--specbound-json=r.json",
        "--specbound-resolution=0.2", f"--rootdir={pytester.path}")
    doc = json.loads((pytester.path / "r.json").read_text())
    return result.ret, doc, result.stdout.str()


def test_a_comparison_against_a_second_server_is_one_module_and_one_registration(
        pytester_env, monkeypatch):
    # the class's server takes 4 ms a step, the other 10 ms: 2.5x the other server's decode
    with FakeServer("vllm", Script(step_s=0.004, jitter=0.1)) as fast, \
            FakeServer("vllm", Script(step_s=0.010, jitter=0.1)) as other:
        monkeypatch.setenv("OTHER_URL", other.url)
        monkeypatch.setenv("OTHER_MIN", "1.5")
        ret, doc, out = run(pytester_env, fast.url, other.url, 1.5)
        assert ret == 0, out
        r = doc["results"][0]
        ratio = r["compared"]["other_server"]["ratio"]
        assert 1.7 < ratio < 3.5 and r["compared"]["other_server"]["n"] >= 2, r["compared"]
        assert any(t.startswith("note: ") and "the other server's decode" in t for t in r["text"])
        # the same comparison, asked for more than the servers differ by: a failure it names
        monkeypatch.setenv("OTHER_MIN", "10")
        ret, doc, out = run(pytester_env, fast.url, other.url, 10)
    assert ret == 1 and "the other server's decode < 10.0x" in out, out
    assert doc["results"][0]["verdict"] == "fail"
    # the identity and JSON hooks: what the conftest added is in the results file
    assert doc["run"]["identity"]["runner"] == "runner-7" and doc["team"] == {"owner": "inference"}
