"""``specbound compare`` and ``specbound history``: runs set against each other."""

from __future__ import annotations

import argparse
from typing import Any


def cmd_compare(args: argparse.Namespace) -> int:
    from pathlib import Path

    from pytest_specbound.gate.references.baseline import EarlierRuns
    from pytest_specbound.report.compare import compare, render
    from pytest_specbound.report.results import read_results

    old = EarlierRuns(Path(args.old), "OLD").found
    new = [r for r in read_results(Path(args.new)) if not r.partial]
    rows = compare({k: ref.result for k, ref in old.items()}, new, args.confidence,
                   args.resolution)
    print(render(rows, args.format))
    return 1 if any(r.decision == "regressed" for r in rows) else 0


def cmd_history(args: argparse.Namespace) -> int:
    from pathlib import Path

    from pytest_specbound.report.history import series, table, write_trend

    found = series([Path(p) for p in args.paths], args.confidence, args.resolution)
    print(table(found))
    if args.plot:
        write_trend(Path(args.plot), found)
    return 0


def add_runs(sub: Any) -> None:
    for name, func, help_text in (
            ("compare", cmd_compare, "every class of two runs side by side: each figure's "
             "change, its interval, the two-sample decision (exit 1 on a regression)"),
            ("history", cmd_history, "each class across many runs, with confirmed steps")):
        p = sub.add_parser(name, help=help_text)
        if name == "compare":
            p.add_argument("old", help="the earlier run: a results JSON or a folder of them")
            p.add_argument("new", help="the later run's results JSON")
            p.add_argument("--format", choices=("table", "markdown", "json"), default="table")
        else:
            p.add_argument("paths", nargs="+", help="results JSON files or folders of them")
            p.add_argument("--plot", help="write a trend chart per class (PNG)")
        p.add_argument("--confidence", type=float, default=None,
                       help="default: each later run's own (what its gate decided at), else 0.95")
        p.add_argument("--resolution", type=float, default=None,
                       help="default: each later run's own, else 0.05")
        p.set_defaults(func=func)
