"""Launch to launch: two launches of one server at one step count, both kept up and measured
in alternating blocks (A B B A A B B A) of the same prompts. Prints each block's per-user decode
rate and accept length, and per pair the ratio of launch B to launch A: a ratio that stays off
1 at every pair is the launch's own speed (where its threads and memory landed), one that
wanders is the box's drift. Two step counts, each a launch of its own, cannot be told apart by
one launch each more finely than this.

    python bench/launch_spread.py --server vllm  [--steps 3] [--level 1] [--requests 8]
    python bench/launch_spread.py --server llama [--steps 3] [--level 1] [--requests 8]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.spec_plan_sweep import llama_plan_budget, vllm_plan_budget  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--server", choices=("vllm", "llama"), default="vllm")
    parser.add_argument("--steps", type=int, default=3, help="the step count K (default 3)")
    parser.add_argument("--level", type=int, default=1, help="concurrency (default 1)")
    parser.add_argument("--requests", type=int, default=8,
                        help="requests a block, all streams together (default 8)")
    args = parser.parse_args()

    from pytest_specbound.advisers.spec_sweep import Measurer
    from pytest_specbound.gate.pipeline.pool import ServerPool
    from pytest_specbound.gate.schema.budget import load_budget
    from pytest_specbound.gate.schema.settings import resolve
    from pytest_specbound.physics.hardware import parse_hardware

    with tempfile.TemporaryDirectory(prefix="launch-spread-") as tmp:
        folder = Path(tmp)
        path = (vllm_plan_budget(folder, one_process=True) if args.server == "vllm"
                else llama_plan_budget(folder))
        budget = load_budget(path)
        name = next(iter(budget.classes))
        settings = resolve({}, {}, lambda _: None)
        hw = parse_hardware("cpu")
        pools = [ServerPool(folder / f"launch-{i}") for i in range(2)]
        try:
            ms = [Measurer(budget, name, hw, settings, pool, keep_up=True) for pool in pools]
            for m in ms:  # both launched and warmed before the first counted block
                m.block(args.steps, args.level, 2 * args.level)
            rates: list[list[float]] = [[], []]
            for i in (0, 1, 1, 0, 0, 1, 1, 0):
                found = ms[i].block(args.steps, args.level, args.requests)
                rate = found.decode_tok_s if found else None
                if rate is None:
                    print(f"launch {'AB'[i]}: no request was timed")
                    return 1
                rates[i].append(rate)
                print(f"launch {'AB'[i]}: {rate:8.1f} tok/s per user, accept "
                      f"{found.accept_length or 1:.2f}", flush=True)
        finally:
            for pool in pools:
                pool.close()
    pairs = [b / a for a, b in zip(rates[0], rates[1], strict=True)]
    print(f"headline: {args.server} K={args.steps} c{args.level}: launch B / launch A per pair "
          f"{', '.join(f'{p:.3f}' for p in pairs)}; pooled "
          f"{sum(rates[1]) / sum(rates[0]):.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
