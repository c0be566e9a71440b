"""GPU telemetry with a fake NVML: every field, old drivers, NVML failing mid-run, findings."""

from __future__ import annotations

import pytest

from pytest_specbound.gate.verdicts.verdict import Verdict, explained
from pytest_specbound.measure.telemetry import Telemetry, findings, sample_gpu
from tests.servers.fake_nvml import FakeNVML


def run(fake: FakeNVML, is_server=None, samples: int = 3) -> dict:
    """Sample until every GPU has ``samples`` readings (or the sampler stopped by itself), then
    stop: a count of readings, not a sleep, so a busy machine cannot starve the test."""
    import time

    t = Telemetry(fake, interval_s=0.01, is_server=is_server).start()
    deadline = time.monotonic() + 60
    while (t._thread is not None and t._thread.is_alive() and time.monotonic() < deadline
           and min(len(s) for s in t.samples) < samples):
        time.sleep(0.005)
    return t.stop()


def test_every_field_is_read():
    s = sample_gpu(FakeNVML(processes=[(42, 9_100_000_000)]), 0)
    assert s["mem_clock_mhz"] == s["mem_max_clock_mhz"] == 8001
    assert s["throttle"] == 0 and s["power_w"] == 350 and s["power_limit_w"] == 700
    assert s["temperature_c"] == 61 and s["utilization_pct"] == 97 and s["memory_used_gb"] == 70
    assert (s["pcie_gen"], s["pcie_width"], s["pcie_max_gen"], s["pcie_max_width"]) == (4, 16, 4, 16)
    assert s["nvlink_active"] == 4 and s["processes"] == [(42, 9.1)] and s["mig"] is False
    assert s["ecc_uncorrected"] == 0


def test_thermal_throttling_is_named_with_its_clock():
    summary = run(FakeNVML(mem_clock=5001, throttle=0x40))
    assert summary["gpus"][0]["throttle"] == {"hardware thermal slowdown": 1.0}
    assert findings(summary) == [("throttle", "memory clock 5001 MHz, max 8001: hardware thermal "
                                              "slowdown (100% of samples) on GPU 0")]


def test_other_findings():
    fake = FakeNVML(gpus=2, pcie=(3, 8, 4, 16), processes=[(4242, 9_100_000_000), (7, 1e9)],
                    ecc=[0, 2], power_limit_mw=450_000)
    found = dict(findings(run(fake, is_server=lambda pid: pid == 7)))
    assert found["process"] == "another process (pid 4242, 9.1 GB) on GPU 1"
    assert found["pcie"].startswith("PCIe link Gen3 x8, capable Gen4 x16 on GPU 1: allreduce")
    assert found["power_cap"] == "power limit 450 W, default 700 W on GPU 1"
    kinds = [k for k, _ in findings(run(FakeNVML(ecc=[0, 0, 3]), is_server=lambda pid: True))]
    assert "ecc" in kinds


def test_an_attached_server_names_no_process():
    summary = run(FakeNVML(processes=[(4242, 9_100_000_000)]))  # whose it is cannot be told
    assert "other_processes" not in summary["gpus"][0] and findings(summary) == []


def test_an_old_driver_leaves_fields_out_without_failing():
    summary = run(FakeNVML(old_driver=True))
    gpu = summary["gpus"][0]
    assert "throttle" not in gpu and "pcie_gen" not in gpu and "nvlink_active" not in gpu
    assert gpu["mem_clock_mhz"]["median"] == 8001 and "note" not in summary


@pytest.mark.parametrize("fake", [FakeNVML(fail_after=40), FakeNVML(init_fails=True)])
def test_nvml_failing_never_fails_the_measurement(fake):
    summary = run(fake)
    assert findings(summary) == [] or summary.get("note")
    if fake.init_fails:
        assert summary == {"gpus": [], "note": "no GPU telemetry: NVML failed (Driver Not Loaded)"}
    else:  # per-field failures are tolerated: a lost GPU leaves the fields out from then on
        assert summary["gpus"][0]["samples"] >= 2


def test_findings_explain_a_system_failure_and_can_fail_a_pass():
    found = [("throttle", "memory clock 5001 MHz, max 8001: thermal on GPU 0")]
    failed = Verdict("fail", ["decode 40 tok/s < floor 50 tok/s"], ("efficiency_below_min",),
                     "system")
    assert explained(failed, found).lines[-1] == "why: memory clock 5001 MHz, max 8001: " \
                                                "thermal on GPU 0"
    drafter = Verdict("fail", ["accept below band"], ("accept_below_band",), "drafter")
    assert explained(drafter, found) == drafter  # the drafter moved: clocks do not explain it
    passed = explained(Verdict("pass"), found, require_no_throttle=True)
    assert passed.status == "fail" and "throttled" in passed.reasons
    assert passed.lines[0] == "the GPU throttled (require_no_throttle): memory clock 5001 MHz, " \
                              "max 8001: thermal on GPU 0"
    assert explained(Verdict("pass"), found) == Verdict("pass")


def test_a_pynvml_without_newer_functions_is_read_as_far_as_it_goes():
    from types import SimpleNamespace

    full = FakeNVML()
    old = SimpleNamespace(**{name: getattr(full, name) for name in (
        "nvmlInit", "nvmlShutdown", "nvmlDeviceGetCount", "nvmlDeviceGetHandleByIndex",
        "nvmlDeviceGetClockInfo", "nvmlDeviceGetMaxClockInfo", "nvmlDeviceGetMemoryInfo")})
    s = sample_gpu(old, 0)
    assert set(s) == {"sm_clock_mhz", "sm_max_clock_mhz", "mem_clock_mhz", "mem_max_clock_mhz",
                      "memory_used_gb"}
    assert run(old)["gpus"][0]["mem_clock_mhz"]["median"] == 8001
