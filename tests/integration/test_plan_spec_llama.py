"""``specbound plan-spec`` against a brute-force sweep on a real llama-server: a draft model that
really drafts, its acceptance per position set by llama.cpp's synthetic mode (position i
accepted with probability 0.9 x 0.75^(i-1)), every K from 1 to 13 launched and measured at two
levels, then the plan (the twin, K=2 and K=8, a confirmation where it recommends a K)."""

from __future__ import annotations

import json
import math

import pytest

from pytest_specbound.advisers.against_sweep import AgainstSweep, against_sweep, referee, sweep
from pytest_specbound.advisers.spec_sweep import PlanAsk, plan_spec
from pytest_specbound.gate.pipeline.pool import ServerPool
from pytest_specbound.gate.schema.budget import load_budget
from pytest_specbound.gate.schema.settings import resolve
from pytest_specbound.physics.hardware import parse_hardware
from pytest_specbound.report.spec_plan import render_plan
from tests.integration.budgets import llama_budget, sweep_text, synth_launch

pytestmark = pytest.mark.integration
RATES = ",".join(f"{0.9 * 0.75 ** i:.3f}" for i in range(13))
STEPS = tuple(range(1, 14))
LEVELS = (1, 2)
LAUNCHES_RESOLVE = 0.80  # two launches of one K here: up to 22% apart in a pair of blocks


def budget_text(llama_server_bin, gguf_models) -> str:
    target, draft = gguf_models["target"], gguf_models["draft"]
    launch = synth_launch(llama_server_bin, target, draft, RATES, 4096, 2)
    return llama_budget(target, draft, "max_tokens = 64\nresolution = 0.1",
                        server=f'launch = "{launch}"\nready_timeout_s = 60')


@pytest.mark.timeout(240)
def test_the_plan_costs_a_third_of_a_sweep_and_predicts_its_accept_lengths(
        tmp_path, llama_server_bin, gguf_models, record_property):
    path = tmp_path / "plan.toml"
    path.write_text(budget_text(llama_server_bin, gguf_models))
    budget = load_budget(path)
    hw = parse_hardware("cpu")
    settings = resolve({"specbound_samples": "12"}, {}, lambda _: None)
    pool, own = ServerPool(tmp_path / "sweep"), ServerPool(tmp_path / "plan")  # no shared twin
    try:
        points, launches, requests = sweep(budget, "coding", hw, settings, pool, STEPS, LEVELS)
        plan = plan_spec(budget, hw, settings, own, PlanAsk("coding", (2, 8), STEPS, LEVELS))
        # where the plan's K and the sweep's best differ, the two side by side, A B B A
        rows = referee(budget, "coding", hw, settings, pool, against_sweep(plan, points), 6)
    finally:
        pool.close()
        own.close()
    doc = plan.to_json()
    said = render_plan(plan) + "".join(
        f"c{r.concurrency}: sweep best K={r.sweep_k} {r.sweep_speedup:.2f}x, plan K={r.plan_k} "
        f"{r.plan_speedup:.2f}x in the sweep" + (
            f"; side by side {r.referee.plan_rates} against {r.referee.sweep_rates} tok/s"
            if r.referee else "") + "\n" for r in rows) + sweep_text(points)
    # the recommended K within 5% of the sweep's best: the same K, or the two measured side by
    # side in A B B A blocks (this 2-core box moves a rate 10-40% between measurements a
    # minute apart, so a sweep's single best point is often its luckiest). Recorded per level
    # (c1/c2_within_5_percent), asserted to what this box resolves: each K is a launch of its
    # own, and two launches of one K kept up side by side ran up to 22% apart in a pair of
    # blocks at concurrency 2 (bench/launch_spread.py --server llama); once here the plan's
    # K=2, measured at 1781 and 1790 tok/s on two launches of its own, ran 1420-1750 on the
    # sweep's beside its twin at 1790-1860 (0.85x side by side; the plan had said 1.05x, and
    # its confirmation landed inside). So within a fifth of the sweep's best, or else the plan
    # said so itself: its confirmation at the K it recommended landed outside the interval it
    # predicted there. Once here the twin's two blocks at concurrency 2 read 67% apart, the
    # plan put K=2 at 1.14x [0.73, 2.76], the confirmation read 0.85x, OUTSIDE, and side by
    # side the twin ran 1.4x faster (the plan now measures such a twin a third time): a plan
    # that misses by more than the box's launches differ, silently, fails this test
    assert all(r.plan_k in points and math.isfinite(r.plan_speedup) for r in rows), said
    levels = {level.concurrency: level for level in plan.levels}

    def flagged(concurrency: int) -> bool:
        level = levels[concurrency]
        predicted = level.at(level.recommended)
        c = level.confirmation
        return c is not None and predicted is not None and not c.landed(predicted)

    def resolved(r: AgainstSweep) -> bool:
        return r.agrees or r.judged_ratio >= LAUNCHES_RESOLVE

    for r in rows:
        record_property(f"c{r.concurrency}_within_5_percent", r.agrees)
    print(said)  # -s: the plan, the sweep and the side by side, pass or fail
    assert all(resolved(r) or flagged(r.concurrency) for r in rows), said
    # at most a third of the sweep's launches and requests: the twin, K=2, K=8, the twin again
    # on its server kept up (and one more launch where a K is recommended, its confirmation):
    # 4 of 14 launches; over K 1-11 the requests came to 92 of 271, just over a third
    assert 3 * plan.launches <= launches and 3 * plan.requests <= requests, \
        (plan.launches, launches, plan.requests, requests)
    for level in plan.levels:
        assert [p.steps for p in level.predictions] == list(STEPS)
        for p in level.predictions:
            assert p.rate_bounds[0] <= p.rate <= p.rate_bounds[1], p
            assert 1.0 < p.accept <= p.steps + 1
        # the acceptance llama.cpp was told (0.9 at position 1, then x0.75), found from two
        # accept lengths of some ten requests each (each a few percent off by itself)
        assert abs(level.acceptance.first - 0.9) < 0.12, said
        assert abs(level.acceptance.decay - 0.75) < 0.12, said
        # the accept length it predicts at each K against the one the sweep measured there, not
        # the one told: llama.cpp's draft model stops drafting where it is unsure, so a long
        # chain accepts less than told (the sweep read 3.76 at K=12, concurrency 2, told 4.49).
        # A sweep point is 12 requests of random acceptance (K=7-9 read 4.54, 4.18, 3.80 in one
        # sweep), so each K is held against the mean of its neighbours' and its own (K=0's is
        # 1), and the misses are judged together: 5-8% on average in four runs, 17% at most
        at = level.concurrency
        misses = {}
        for p in level.predictions:
            near = [points[k][at].accept for k in (p.steps - 1, p.steps, p.steps + 1)
                    if k in points]
            swept = sum(near) / len(near)
            misses[p.steps] = abs(p.accept - swept) / swept
        assert sum(misses.values()) / len(misses) < 0.12 and max(misses.values()) < 0.25, \
            f"c{at}: predicted accept against the sweep's, miss per K {misses}\n{said}"
        c = level.confirmation
        assert (c is None) == (level.recommended == 0), said
        # the twin measured again after the step counts, on the server kept up beside them
        assert level.base_drift is not None and level.base_blocks in (2, 3), said
        assert "apart, pooled" in said or "measured a third time" in said, said
    assert doc["levels"][0]["recommended_steps"] == plan.levels[0].recommended
    assert "recommended: " in said and json.dumps(doc)
