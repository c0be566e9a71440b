"""``specbound``: roofline, hw, measure, calibrate, plan-spec, report, compare, history. Errors are one
line, exit status 2."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from typing import Any

from pytest_specbound import interrupts
from pytest_specbound.cli.calibrate import add_calibrate
from pytest_specbound.cli.catalogs import add_hw, add_models
from pytest_specbound.cli.measure import add_measure
from pytest_specbound.cli.plan_spec import add_plan_spec
from pytest_specbound.cli.report import add_report
from pytest_specbound.cli.roofline import add_roofline
from pytest_specbound.cli.runs import add_runs
from pytest_specbound.errors import SpecboundError

# each adds its subcommand's parser, in the order ``specbound --help`` lists them
SUBCOMMANDS: list[Callable[[Any], None]] = [add_roofline, add_hw, add_models, add_measure,
                                            add_calibrate, add_plan_spec, add_report, add_runs]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="specbound", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    for add in SUBCOMMANDS:
        add(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    restore = interrupts.install()
    try:
        return int(args.func(args))
    except SpecboundError as exc:
        print(f"specbound: error: {exc}", file=sys.stderr)
        return 2
    except BrokenPipeError:  # output piped into head & co.
        return 0
    except KeyboardInterrupt:
        print("specbound: interrupted", file=sys.stderr)
        return 130
    finally:
        restore()
