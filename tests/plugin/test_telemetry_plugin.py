"""GPU telemetry through pytest with a fake NVML in place of nvidia-ml-py."""

from __future__ import annotations

import json
import sys

import pytest

from tests.plugin.conftest import budget_text

FAKE = """from tests.servers.fake_nvml import install
install(globals(), mem_clock=5001, throttle=0x40)
"""


@pytest.fixture
def thermal(pytester_env):
    pytester_env.makepyfile(pynvml=FAKE)
    pytester_env.syspathinsert()
    yield pytester_env
    sys.modules.pop("pynvml", None)


def gate(pytester, url, min_eff: float, extra: str = ""):
    (pytester.path / "budgets").mkdir(exist_ok=True)
    (pytester.path / "budgets" / "gate.toml").write_text(budget_text(url, min_eff=min_eff,
                                                                     extra=extra))
    result = pytester.runpytest("--specbound-hw=h100", "--specbound-samples=6",
                                "--specbound-json=out/results.json", "budgets/")
    return result, json.loads((pytester.path / "out/results.json").read_text())["results"][0]


def test_a_marginal_class_fails_with_the_throttle_named(thermal, fake_vllm):
    result, r = gate(thermal, fake_vllm.url, 0.95)  # the fake runs at ~0.8 of the roofline
    result.assert_outcomes(failed=1)
    out = result.stdout.str()
    assert "the system slowed down" in out
    assert "why: memory clock 5001 MHz, max 8001: hardware thermal slowdown (100% of samples) " \
           "on GPU 0" in out
    gpu = r["telemetry"]["gpus"][0]
    assert gpu["throttle"] == {"hardware thermal slowdown": 1.0} and gpu["samples"] >= 1
    assert gpu["mem_clock_mhz"]["median"] == 5001 and gpu["temperature_c"] == 84


def test_require_no_throttle_fails_a_class_that_passes(thermal, fake_vllm):
    result, r = gate(thermal, fake_vllm.url, 0.5, "require_no_throttle = true")
    result.assert_outcomes(failed=1)
    assert "the GPU throttled (require_no_throttle): memory clock 5001 MHz" in result.stdout.str()
    assert "throttled" in r["reasons"] and r["diagnosis"] == "system"


def test_without_nvidia_ml_py_the_result_says_so(pytester_env, fake_vllm):
    result, r = gate(pytester_env, fake_vllm.url, 0.5)
    result.assert_outcomes(passed=1)
    assert r["telemetry"] == {"note": "no GPU telemetry: nvidia-ml-py is not installed "
                                      "(pip install 'pytest-specbound[gpu]')"}
