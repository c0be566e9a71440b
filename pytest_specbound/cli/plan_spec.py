"""``specbound plan-spec``: which draft step count K to run at each concurrency level, predicted
from the twin and two measured step counts, and confirmed by one more measurement."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from pytest_specbound.cli.args import hardware_from_args, nonneg_int


def steps_range(text: str) -> tuple[int, ...]:
    """``1-8`` or ``1,2,4,6``: the step counts to predict."""
    try:
        if "-" in text:
            low, high = (int(x) for x in text.split("-", 1))
            found = tuple(range(low, high + 1))
        else:
            found = tuple(sorted({int(x) for x in text.split(",") if x.strip()}))
    except ValueError:
        raise argparse.ArgumentTypeError(f"a range such as 1-8 or a list such as 1,2,4, got "
                                         f"{text!r}") from None
    if not found or min(found) < 1 or max(found) > 64:
        raise argparse.ArgumentTypeError(f"step counts from 1 to 64, got {text!r}")
    return found


def two_steps(text: str) -> tuple[int, int]:
    found = steps_range(text)
    if len(found) != 2:
        raise argparse.ArgumentTypeError(f"two distinct step counts such as 1,3, got {text!r}")
    return found[0], found[1]


def apart(steps: tuple[int, ...]) -> tuple[int, int]:
    """Two step counts a quarter and three quarters into the range: the others are then mostly
    interpolated (an engine's cost per step is not a line over the whole range)."""
    low, high = min(steps), max(steps)
    first = low + (high - low) // 4
    return first, max(first + 1, low + 3 * (high - low) // 4)


def cmd_plan_spec(args: argparse.Namespace) -> int:
    from pathlib import Path

    from pytest_specbound.advisers.spec_sweep import PlanAsk, plan_spec
    from pytest_specbound.atomic import write_text
    from pytest_specbound.errors import ConfigError
    from pytest_specbound.gate.pipeline.pool import ServerPool
    from pytest_specbound.gate.schema.budget import load_budget
    from pytest_specbound.gate.schema.settings import resolve
    from pytest_specbound.report.spec_plan import render_plan, write_plan_plot

    budget = load_budget(args.budget)
    hw = hardware_from_args(args.hw, None)
    budget = budget.for_hardware(hw.label)
    name = args.class_name or (next(iter(budget.classes)) if len(budget.classes) == 1 else None)
    if name is None:
        raise ConfigError(f"--class: {args.budget} has several classes; valid: "
                          f"{', '.join(sorted(budget.classes))}")
    if name not in budget.classes:
        raise ConfigError(f"--class: no class '{name}' in {args.budget}; valid: "
                          f"{', '.join(sorted(budget.classes))}")
    steps = budget.speculation.steps
    predict = args.steps or tuple(range(1, max(8, 2 * steps) + 1))
    measure = args.measure or apart(predict)
    settings = resolve({"specbound_samples": str(args.samples),
                        "specbound_concurrency": args.concurrency}, {}, lambda _: None)
    levels = settings.concurrency or budget.classes[name].concurrency
    pool = ServerPool(Path(args.log_dir))
    try:
        ask = PlanAsk(name, measure, predict, tuple(levels), confirm=not args.no_confirm)
        plan = plan_spec(budget, hw, settings, pool, ask,
                         say=lambda line: print(f"specbound: {line}", file=sys.stderr))
    finally:
        pool.close()
    sys.stdout.write(render_plan(plan))
    if args.json:
        import json

        write_text(Path(args.json), json.dumps(plan.to_json(), indent=2) + "\n")
        print(f"specbound: plan written to {args.json}", file=sys.stderr)
    if args.plot:
        write_plan_plot(plan, Path(args.plot))
        print(f"specbound: plot written to {args.plot}", file=sys.stderr)
    return 0


def add_plan_spec(sub: Any) -> None:
    p = sub.add_parser("plan-spec", help="which draft step count at which load: predicted from "
                                         "two measured step counts, confirmed by one more")
    p.add_argument("budget")
    p.add_argument("--hw", required=True)
    p.add_argument("--class", dest="class_name", help="the budget class (default: its only one)")
    p.add_argument("--measure", type=two_steps,
                   help="the two step counts measured, e.g. 2,6 (default: a quarter and three "
                        "quarters into --steps)")
    p.add_argument("--steps", type=steps_range,
                   help="the step counts predicted, e.g. 1-8 (default: 1 to twice the budget's, "
                        "at least 8)")
    p.add_argument("--concurrency", help="levels, e.g. 1,4 (default: the class's)")
    p.add_argument("--samples", type=nonneg_int, default=20,
                   help="most requests per measurement (each stops once its rate is known to "
                        "half the resolution)")
    p.add_argument("--no-confirm", action="store_true",
                   help="skip the confirming measurement at the recommended K")
    p.add_argument("--json", help="write the plan as JSON to this file")
    p.add_argument("--plot", help="write speedup against K per level to this PNG")
    p.add_argument("--log-dir", default=".specbound/logs")
    p.set_defaults(func=cmd_plan_spec)
