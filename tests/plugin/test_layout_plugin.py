"""A budget's [parallel] layout through the plugin: its roofline at that layout (the slowest
GPU's parts, the all-to-all), and a server that runs another layout named at setup."""

from __future__ import annotations

import json

from tests.plugin.test_plugin import write_budget
from tests.servers.fake import FakeServer, Script

BUDGET = """
[model]
name = "deepseek-r1"
served_name = "test-model"

[speculative]
method = "eagle3"
steps = 3

[server]
backend = "sglang"
url = "{url}"

[parallel]
ep = 8
dp_attention = true

[classes.chat]
max_tokens = 41
accept = [1, 5]
min_efficiency = 0.01
"""


def test_a_server_on_another_layout_fails_setup_naming_both(pytester_env):
    info = {"tp_size": 8, "ep_size": 1, "enable_dp_attention": False}
    with FakeServer("sglang", Script(server_info=info)) as fake:
        write_budget(pytester_env, BUDGET.format(url=fake.url))
        result = pytester_env.runpytest("--specbound-hw=h200x8", "--specbound-samples=4")
    out = result.stdout.str()
    result.assert_outcomes(failed=1)
    assert "the server does not run what the budget describes: budget says TP8 EP8 DP " \
           "attention (" in out, out
    assert "the server runs EP 1 (/server_info ep_size 1)" in out
    assert "the server runs no DP attention (/server_info enable_dp_attention False)" in out


def test_the_roofline_at_the_budgets_layout(pytester_env):
    info = {"tp_size": 8, "ep_size": 8, "dp_size": 8, "enable_dp_attention": True}
    with FakeServer("sglang", Script(server_info=info)) as fake:
        write_budget(pytester_env, BUDGET.format(url=fake.url))
        result = pytester_env.runpytest("--specbound-hw=h200x8", "--specbound-samples=4",
                                        "--specbound-json=r.json")
    out = result.stdout.str()
    assert "all-to-all" in out, out  # the summary's roofline line names the part
    (r,) = json.loads((pytester_env.path / "r.json").read_text())["results"]
    parts = r["roofline"]["components_ms"]
    assert parts["all_to_all"] > 0 and parts["allreduce"] == 0  # DP attention, experts by EP
    assert r["roofline"]["layout"]["label"] == "TP8 EP8 DP attention"
    assert any(n.startswith("experts: 4 tokens hit") for n in r["roofline"]["notes"])


def test_an_attached_vllm_in_dev_mode_on_another_layout_fails_setup(pytester_env):
    """No launch command to read: the vLLM's own /server_info (VLLM_SERVER_DEV_MODE=1) says it
    runs TP 1, and a budget for TP 2 on two GPUs fails setup naming both; nothing is measured."""
    from tests.unit.test_layout import vllm_config

    budget = BUDGET.replace('backend = "sglang"', 'backend = "vllm"').replace(
        "ep = 8\ndp_attention = true", "tp = 2").replace('name = "deepseek-r1"',
                                                         'name = "llama-3.1-8b"')
    with FakeServer("vllm", Script(vllm_config=vllm_config(1))) as fake:
        write_budget(pytester_env, budget.format(url=fake.url))
        result = pytester_env.runpytest("--specbound-hw=h200x2", "--specbound-samples=4",
                                        "--specbound-json=r.json")
        served = len(fake.requests)
    out = result.stdout.str()
    result.assert_outcomes(failed=1)
    assert "hardware h200x2 has 2 GPUs; the server runs TP 1 (/server_info parallel_config " \
           "tensor_parallel_size 1)" in out, out
    assert "budget says TP2 (" in out and "; the server runs TP 1 (/server_info" in out, out
    assert served == 0
    (r,) = json.loads((pytester_env.path / "r.json").read_text())["results"]
    assert r["verdict"] == "error" and not r.get("requests"), r
