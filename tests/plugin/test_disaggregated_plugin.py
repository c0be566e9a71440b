"""Prefill and decode apart: requests through a router, the decode server's own counters and
settings read beside it, and the results saying which side each figure is from."""

from __future__ import annotations

import json
from urllib.parse import urlsplit

import pytest

from tests.plugin.conftest import budget_text
from tests.plugin.test_plugin import write_budget
from tests.servers.router import Router


def test_the_decode_side_is_measured_behind_its_router(pytester_env, fake_vllm):
    with Router(urlsplit(fake_vllm.url).port or 0) as router:
        text = budget_text(router.url, accept="[3.5, 4.0]", min_eff=0.5) + f"""
[disaggregated]
decode_url = "{fake_vllm.url}"
decode_hw = "h100"
prefill_hw = "h100x2"
kv_link_gbs = 50
"""
        write_budget(pytester_env, text)
        result = pytester_env.runpytest("--specbound-hw=h100", "--specbound-samples=6",
                                        "--specbound-json=r.json")
        assert any(p.startswith("/v1/") for p in router.routed)  # requests went through it
    out = result.stdout.str()
    result.assert_outcomes(passed=1)
    (r,) = json.loads((pytester_env.path / "r.json").read_text())["results"]
    # the accept came from the decode server's own counters: the router has none
    assert r["accept_source"] == "server" and r["accept_length"] > 3
    split = r["disaggregated"]
    assert split["decode_url"] == fake_vllm.url and split["prefill_hw"] == "h100-sxmx2"
    floor = split["ttft_floor_ms"]
    assert floor["total"] == pytest.approx(floor["prefill"] + floor["kv_transfer"], abs=1e-3)
    assert floor["kv_transfer"] > 0
    assert f"decode side {fake_vllm.url} (h100-sxm): its roofline, accept and settings" in out


def test_a_missing_decode_url_is_one_line(tmp_path):
    from pytest_specbound.errors import ConfigError
    from pytest_specbound.gate.schema.budget import load_budget

    path = tmp_path / "b.toml"
    path.write_text('[model]\nname = "llama-3.1-8b"\n[server]\nurl = "http://h:1"\n'
                    '[disaggregated]\nprefill_url = "http://p:1"\n[classes.chat]\n')
    with pytest.raises(ConfigError, match=r"b\.toml: disaggregated\.decode_url: the decode "
                                          r"server's URL \(http://\.\.\.\) is required"):
        load_budget(path)


def test_the_kv_transfer_is_the_prompts_kv_over_the_link():
    from pytest_specbound.gate.schema.disaggregated import Disaggregated
    from pytest_specbound.physics.hardware import parse_hardware
    from pytest_specbound.physics.models import load_model
    from pytest_specbound.physics.roofline import compute_roofline
    from pytest_specbound.physics.speculative import parse_speculation

    model = load_model("llama-3.1-8b")  # 131,072 bytes of KV per token (bf16, 32 layers x 8 x 128)
    roof = compute_roofline(parse_hardware("h100"), model, parse_speculation("none"))
    split = Disaggregated("http://d:1", kv_link_gbs=50)
    ms = split.kv_transfer_ms(2000, roof, parse_hardware("h100x8"))  # one lane: the decode GPU
    assert ms == pytest.approx(2000 * model.kv_bytes_per_token / 50e9 * 1e3)
