"""GPU telemetry beyond the local host: a failing class's findings name a throttled GPU on
another node, read from its DCGM exporter (a stand-in serving dcgm-exporter's real names)."""

from __future__ import annotations

import json

import pytest

from pytest_specbound.measure.dcgm import parse_exposition
from tests.plugin.conftest import budget_text
from tests.plugin.test_plugin import write_budget
from tests.servers.fake_dcgm import DcgmGpu, FakeDcgm


def test_a_throttled_gpu_on_another_node_is_named_in_the_findings(pytester_env, fake_vllm):
    slow = DcgmGpu(sm_clock=1100, throttle=0x8)  # hardware slowdown
    with FakeDcgm("node-b", [DcgmGpu(), DcgmGpu(), DcgmGpu(), slow]) as dcgm:
        text = budget_text(fake_vllm.url, accept="[3.5, 4.0]", min_eff=0.99) + \
            f'\n[telemetry]\ndcgm = ["{dcgm.url}", "http://127.0.0.1:1/metrics"]\n'
        write_budget(pytester_env, text)
        result = pytester_env.runpytest("--specbound-hw=h100", "--specbound-samples=6",
                                        "--specbound-json=r.json")
        assert dcgm.scrapes >= 2  # before and after the class at least
    out = result.stdout.str()
    result.assert_outcomes(failed=1)
    (r,) = json.loads((pytester_env.path / "r.json").read_text())["results"]
    assert r["diagnosis"] == "system", r["text"]
    assert "SM clock 1100 MHz, max 1980: hardware slowdown (100% of samples) on GPU 3 on " \
           "node-b" in out, out
    gpus = r["telemetry"]["gpus"]
    assert [g["where"] for g in gpus] == [f"GPU {i} on node-b" for i in range(4)]
    assert "DCGM exporter http://127.0.0.1:1/metrics could not be read" in r["telemetry"]["note"]


@pytest.mark.parametrize("event_reasons", [False, True])
def test_the_exporters_page_reads_as_nvmls_fields(event_reasons):
    fake = FakeDcgm("node-a", [DcgmGpu(throttle=0x40)], event_reasons=event_reasons)
    (reading,) = parse_exposition(fake.page(), "http://node-a:9400/metrics").items()
    assert reading == (("node-a", "0"), {"sm_clock_mhz": 1980.0, "mem_clock_mhz": 2619.0,
                                        "sm_max_clock_mhz": 1980.0, "temperature_c": 61.0,
                                        "power_w": 520.0, "throttle": 0x40})


def test_a_bad_dcgm_setting_is_one_line(tmp_path):
    from pytest_specbound.errors import ConfigError
    from pytest_specbound.gate.schema.budget import load_budget

    path = tmp_path / "b.toml"
    path.write_text('[model]\nname = "llama-3.1-8b"\n[server]\nurl = "http://h:1"\n'
                    '[telemetry]\ndcgm = ["node-a:9400"]\n[classes.chat]\n')
    with pytest.raises(ConfigError, match=r"b\.toml:\d+: telemetry\.dcgm: a list of DCGM "
                                          r"exporter URLs"):
        load_budget(path)
