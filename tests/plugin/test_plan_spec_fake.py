"""``specbound plan-spec`` end to end on protocol-faithful vLLM servers launched as ``vllm
serve`` (the shim of test_speedup_plugin): the twin from the launch without speculation, the
step counts written into ``--speculative-config``, the acceptance per position from vLLM's
per-request histogram where the launch asks for it, the table, the JSON and the plot."""

from __future__ import annotations

import json

import pytest

from tests.plugin.test_speedup_plugin import write_budget


@pytest.mark.parametrize("metrics", ["summary", "none"])
def test_the_plan_on_a_fake_vllm_counts_acceptance_per_position_where_vllm_does(
        pytester_env, capsys, metrics):
    from pytest_specbound.cli import main

    budget = write_budget(pytester_env)
    text = budget.read_text().replace(
        "--port {port}", f"--per-request-spec-decode-metrics {metrics} --port {{port}}")
    if metrics == "none":  # the family read from the launch command (the program is vllm)
        text = text.replace('backend = "vllm"', 'backend = "auto"')
    budget.write_text(text)
    out = pytester_env.path
    levels = "1" if metrics == "summary" else "1,2"
    code = main(["plan-spec", str(budget), "--hw", "h100", "--measure", "1,3", "--steps", "1-5",
                 "--concurrency", levels, "--samples", "8", "--json", str(out / "plan.json"),
                 "--plot", str(out / "plan.png"), "--log-dir", str(out / "logs")])
    said = capsys.readouterr()
    assert code == 0, said.out + said.err
    plan = json.loads((out / "plan.json").read_text())
    # on a GPU one server at a time: the twin, K=1, K=3, the twin again at each level (a fresh
    # launch each), the confirmation at K=5; every launch counted
    launched = (out / "launches.txt").read_text().split()
    assert plan["launches"] == len(launched) == 4 + len(levels.split(",")), launched
    level = plan["levels"][0]
    # the fake accepts every draft: (K + 1) tokens a 7 ms step against one token a 5.6 ms step
    # without speculation, so the longest chain predicted is the fastest, and it is confirmed
    assert level["recommended_steps"] == 5, said.out
    assert "confirmed: K=5 measured" in said.out
    commands = plan["commands"]
    assert set(commands) == {"1", "3", "5"}
    assert all(f'"num_speculative_tokens":{k}' in commands[k] for k in commands), commands
    how = level["acceptance"]["how"]
    if metrics == "summary":  # every position accepted, counted by vLLM per position
        assert how.startswith("measured per position 1-3"), how
        assert level["acceptance"]["positions"] == [1.0, 1.0, 1.0]
        assert all(abs(p["accept_length"] - (p["steps"] + 1)) < 0.01
                   for p in level["predictions"])
    else:  # vLLM counts nothing per request: fitted through two accept lengths, and said how
        assert how.startswith("fitted on K=1 and K=3") and \
            "--per-request-spec-decode-metrics summary" in how, how
        assert level["acceptance"]["positions"] == []
    assert (out / "plan.png").stat().st_size > 0


@pytest.mark.parametrize(("hw", "launches"), [("h100", 4), ("cpu", 2)])
def test_side_by_side_blocks_alternate_and_read_each_ks_own_rate(pytester_env, hw, launches):
    """The referee against a sweep: K=3 and the twin in blocks A B B A, each block's rate the
    fake's own: 4 tokens a 7 ms step against 1 token a 5.6 ms step. On a GPU each block on its
    own launch (a fresh twin warmed by one unmeasured request); on the CPU both stay up."""
    from pytest_specbound.advisers.against_sweep import head_to_head
    from pytest_specbound.advisers.spec_sweep import Measurer
    from pytest_specbound.gate.pipeline.pool import ServerPool
    from pytest_specbound.gate.schema.budget import load_budget
    from pytest_specbound.gate.schema.settings import resolve
    from pytest_specbound.physics.hardware import parse_hardware

    budget = load_budget(write_budget(pytester_env))
    settings = resolve({}, {}, lambda _: None)
    pool = ServerPool(pytester_env.path / "logs")
    try:
        m = Measurer(budget, "chat", parse_hardware(hw), settings, pool)
        found = head_to_head(m, (3, 0), 1, requests=3)
    finally:
        pool.close()
    assert len(found.plan_rates) == len(found.sweep_rates) == 2
    spec, plain = 4 / 0.007, 1 / 0.0056
    # the fake's steps are sleeps: a loaded box only lengthens them
    assert all(0.5 * spec < r <= 1.05 * spec for r in found.plan_rates), found
    assert all(0.5 * plain < r <= 1.05 * plain for r in found.sweep_rates), found
    assert found.ratio > 2, found
    # each block's accept length: the fake's K=3 accepts every draft (4 a round)
    assert [round(a or 0, 6) for a in found.plan_accepts] == [4.0, 4.0], found
    assert all(a in (None, 1.0) for a in found.sweep_accepts), found  # nothing drafted
    launched = (pytester_env.path / "launches.txt").read_text().split()
    # on a GPU one server at a time: K=3, the twin, the twin again, K=3 again; on the CPU the
    # two launched once each
    assert len(launched) == m.launches == launches, launched
