"""``specbound report``: results JSON files from several runners merged into one table."""

from __future__ import annotations

import argparse
from typing import Any


def cmd_report(args: argparse.Namespace) -> int:
    from pathlib import Path

    from pytest_specbound.report.results import read_results
    from pytest_specbound.report.table import markdown, terminal

    results = [r for path in args.files for r in read_results(Path(path))]
    print(markdown(results) if args.format == "markdown" else terminal(results))
    if args.plot:
        from pytest_specbound.report.plot import write_plot

        write_plot(Path(args.plot), results)
    return 1 if any(r.status not in ("pass", "skip") for r in results) else 0


def add_report(sub: Any) -> None:
    p = sub.add_parser("report", help="merge results JSON files from several runners")
    p.add_argument("files", nargs="+")
    p.add_argument("--format", choices=("table", "markdown"), default="table")
    p.add_argument("--plot", help="write the plot of every merged run, a row of panels per "
                   "hardware (PNG)")
    p.set_defaults(func=cmd_report)
