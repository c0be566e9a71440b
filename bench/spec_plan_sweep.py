"""The speculation plan against a brute-force sweep, side by side on one real server: every K in
the range launched and measured at every level (as ``vllm bench sweep`` does it), then
``specbound plan-spec`` (the twin, two step counts, one confirmation). Per level it prints the
sweep's best K and speedup, the plan's K and the sweep's own speedup there, their ratio, and the
launches and requests each took.

    python bench/spec_plan_sweep.py --server llama [--steps 1-11] [--levels 1,4]
    python bench/spec_plan_sweep.py --server vllm  [--steps 1-11] [--levels 1,4]

llama: llama-server with the CPU demo's models (a 0.2 GB target whose verify grows with K on
the CPU, a small draft model) and a synthetic acceptance per position (``--spec-synth-rates``,
position i accepted with probability 0.92 x 0.82^(i-1)), the drafting real. vllm: the CPU
wheel with a tiny local llama and n-gram lookup on repetitive prompts, its per-request
acceptance histogram on (the acceptance per draft position).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

RATES = ",".join(f"{0.92 * 0.82 ** i:.3f}" for i in range(16))


def llama_plan_budget(folder: Path) -> Path:
    from pytest_specbound.physics.demo import demo_models
    from tests.integration.budgets import llama_budget, synth_launch

    models = demo_models(folder)
    target, draft = Path(models["demo_gguf"]), Path(models["demo_draft_gguf"])
    launch = synth_launch("{llama_server}", target, draft, RATES, 8192, 4)
    path = folder / "plan-llama.toml"
    path.write_text(llama_budget(target, draft, "max_tokens = 64\nresolution = 0.1",
                                 server=f'launch = "{launch}"\nready_timeout_s = 120',
                                 roofline="context = 300"))
    return path


def vllm_plan_budget(folder: Path, one_process: bool = False) -> Path:
    from tests.integration.budgets import vllm_ngram_budget
    from tests.servers.hf_models import write_tiny_llama

    model = write_tiny_llama(folder / "tiny-llama")
    path = folder / "plan-vllm.toml"
    # per-request counts of rounds by accepted length: the acceptance per draft position
    path.write_text(vllm_ngram_budget(model, ("--per-request-spec-decode-metrics", "summary"),
                                      served_name=True, one_process=one_process, tables="""
[classes.repetitive]
prompts = "repetitive"
max_tokens = 64
resolution = 0.1
"""))
    return path


def main() -> None:
    from pytest_specbound.advisers.against_sweep import against_sweep, referee, sweep
    from pytest_specbound.advisers.spec_sweep import PlanAsk, plan_spec
    from pytest_specbound.cli.plan_spec import steps_range
    from pytest_specbound.gate.pipeline.pool import ServerPool
    from pytest_specbound.gate.schema.budget import load_budget
    from pytest_specbound.gate.schema.settings import resolve
    from pytest_specbound.physics.hardware import parse_hardware
    from pytest_specbound.report.spec_plan import render_plan
    from pytest_specbound.values import levels_text

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--server", choices=("llama", "vllm"), default="llama")
    parser.add_argument("--steps", type=steps_range, default=tuple(range(1, 12)))
    parser.add_argument("--measure", default="2,8")
    parser.add_argument("--levels", default="1,4")
    parser.add_argument("--samples", default="16")
    parser.add_argument("--referee", type=int, default=6,
                        help="requests per stream a block where the plan's K and the sweep's best differ, "
                             "the two measured side by side A B B A (0: none)")
    parser.add_argument("--one-process", action="store_true",
                        help="vllm: the engine in the API server's process (faster launches)")
    args = parser.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="spec-plan-"))
    path = llama_plan_budget(folder) if args.server == "llama" else \
        vllm_plan_budget(folder, args.one_process)
    budget = load_budget(path)
    name = next(iter(budget.classes))
    levels = levels_text(args.levels)
    hw = parse_hardware("cpu")
    settings = resolve({"specbound_samples": args.samples}, {}, lambda _: None)

    def say(line: str) -> None:
        print(f"  {line}", file=sys.stderr)

    pool, own = ServerPool(folder / "sweep"), ServerPool(folder / "plan")  # no shared twin
    try:
        started = time.monotonic()
        points, launches, requests = sweep(budget, name, hw, settings, pool, args.steps, levels,
                                           say)
        sweep_s = time.monotonic() - started
        started = time.monotonic()
        k1, k2 = (int(x) for x in args.measure.split(","))
        plan = plan_spec(budget, hw, settings, own,
                         PlanAsk(name, (k1, k2), tuple(args.steps), tuple(levels)), say)
        plan_s = time.monotonic() - started
        rows = against_sweep(plan, points)
        if args.referee:
            rows = referee(budget, name, hw, settings, pool, rows, args.referee, say)
    finally:
        pool.close()
        own.close()
    print(render_plan(plan))
    print(f"{'level':>5}  {'sweep K':>7}  {'speedup':>7}  {'plan K':>6}  {'sweep there':>11}  "
          f"{'ratio':>6}  {'apart':>5}  side by side (A B B A): plan K / sweep K")
    for row in rows:
        ref = row.referee
        side = (f"{ref.ratio:.3f} (pairs {ref.ratio_bounds[0]:.3f}-{ref.ratio_bounds[1]:.3f}; "
                f"plan K {', '.join(f'{r:.1f}' for r in ref.plan_rates)}, sweep K "
                f"{', '.join(f'{r:.1f}' for r in ref.sweep_rates)} tok/s)") if ref else \
            "the same K" if row.plan_k == row.sweep_k else "not run"
        print(f"{row.concurrency:>5}  {row.sweep_k:>7}  {row.sweep_speedup:>6.2f}x  "
              f"{row.plan_k:>6}  {row.plan_speedup:>10.2f}x  {row.ratio:>6.3f}  "
              f"{'no' if row.indistinct else 'yes':>5}  {side}; within 5%: "
              f"{'yes' if row.agrees else 'NO'}")
    print(f"sweep: {launches} launches, {requests} requests, {sweep_s:.0f} s; plan: "
          f"{plan.launches} launches ({plan.launches / launches:.2f} of the sweep's), "
          f"{plan.requests} requests ({plan.requests / requests:.2f}), {plan_s:.0f} s")
    for k in sorted(points):
        rates = ", ".join(f"c{c} {m.rate:.1f} (accept {m.accept:.2f})"
                          for c, m in sorted(points[k].items()))
        print(f"sweep K={k}: {rates}")


if __name__ == "__main__":
    main()
