"""``specbound calibrate``: measure a budget and propose its bands and floors (a diff)."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from pytest_specbound.cli.args import hardware_from_args, nonneg_int


def cmd_calibrate(args: argparse.Namespace) -> int:
    import difflib
    from dataclasses import replace
    from pathlib import Path

    from pytest_specbound._toml import read_text
    from pytest_specbound.advisers.calibrate import measure_budget, proposed_text
    from pytest_specbound.atomic import write_text
    from pytest_specbound.gate.pipeline.pool import ServerPool
    from pytest_specbound.gate.schema.budget import load_budget
    from pytest_specbound.gate.schema.settings import resolve

    budget = load_budget(args.budget)
    hw = hardware_from_args(args.hw, None)
    # one look at the full sample count: the interval at the plain confidence level
    settings = resolve({"specbound_url": args.url, "specbound_samples": str(args.samples),
                        "specbound_min_samples": str(args.samples),
                        "specbound_concurrency": args.concurrency,
                        "specbound_speedup": "1" if args.speedup else None},
                       {}, lambda name: None)
    budget = budget.for_hardware(hw.label)
    pool = ServerPool(Path(args.log_dir))
    text = read_text(args.budget)
    runs = [(name, replace(cls, concurrency=settings.concurrency or cls.concurrency))
            for name, cls in budget.classes.items()]
    try:
        results = measure_budget(budget, hw, settings, pool, runs,
                                 lambda line: print(f"specbound: {line}", file=sys.stderr))
    finally:
        pool.close()
    new = proposed_text(text, budget, hw.label, runs, results,
                        lambda line: print(line, file=sys.stderr))
    diff = difflib.unified_diff(text.splitlines(keepends=True), new.splitlines(keepends=True),
                                args.budget, args.budget + " (proposed)")
    sys.stdout.writelines(diff)
    if args.write:
        write_text(Path(args.budget), new)
        print(f"wrote {args.budget}: review the change before committing it", file=sys.stderr)
    return 0


def add_calibrate(sub: Any) -> None:
    p = sub.add_parser("calibrate", help="measure a budget and propose bands and floors")
    p.add_argument("budget")
    p.add_argument("--hw", required=True)
    p.add_argument("--url", help="attach instead of launching the budget's command")
    p.add_argument("--samples", type=nonneg_int, default=20)
    p.add_argument("--concurrency", help="levels to calibrate, e.g. 1,4 (default: the budget's)")
    p.add_argument("--log-dir", default=".specbound/logs")
    p.add_argument("--write", action="store_true", help="rewrite the budget (default: diff only)")
    p.add_argument("--speedup", action="store_true",
                   help="also measure the server without speculation: the speedup, and the "
                        "engine's cost per draft forward proposed as [roofline] draft_step_ms")
    p.set_defaults(func=cmd_calibrate)
