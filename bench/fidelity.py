"""The roofline against public measurements (pytest_specbound/data/anchors.toml).

Prints every anchor's efficiency (measured / roofline at its accept length), then per source the
no-speculation efficiency beside the speculative rows', the gap, and where a source varied the
draft steps, the engine's measured cost per extra step beside the roofline's. The rows are the
ones tests/unit/test_anchors.py asserts on (never above 1.00).
"""

from __future__ import annotations

import statistics
from collections import defaultdict

from pytest_specbound.physics.anchors import (
    Anchor,
    StepPrediction,
    anchors,
    by_source,
    cross_model_predictions,
    kind,
    step_predictions,
    two_part_predictions,
)

GAP_TARGET = 0.15


def step_slopes(rows: list[Anchor]) -> list[tuple[str, float, float, int]]:
    """(method, measured ms per extra draft step, roofline ms per extra step, rows) for each
    method a source ran at several step counts with one tree shape (least squares on rounds)."""
    by_method: dict[str, list[Anchor]] = defaultdict(list)
    for a in rows:
        spec = a.roofline.spec
        if spec.draft_tokens == spec.steps:  # chains only: a tree changes the verify too
            by_method[spec.method].append(a)
    out = []
    for method, group in by_method.items():
        if len({a.roofline.spec.steps for a in group}) < 3:
            continue
        xs = [float(a.roofline.spec.steps) for a in group]
        measured = [a.accept / float(a.row["tok_s"]) * 1e3 for a in group]
        modelled = [a.roofline.round_ms for a in group]
        out.append((method, _slope(xs, measured), _slope(xs, modelled), len(group)))
    return out


def _slope(xs: list[float], ys: list[float]) -> float:
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    covariance = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True))
    return covariance / sum((x - mx) ** 2 for x in xs)


def predictions_table(rows: list[Anchor]) -> None:
    """The cost per draft forward fitted on each source's fewest steps, predicting its others."""
    print()
    print("cost per draft forward fitted on one step count (the fewest), predicting the others")
    print("(round = roofline + the no-speculation row's own excess + forwards x cost):")
    print(f"{'source, model, dtype':<36} {'method':<7} {'fitted on':<12} {'ms/fwd':>7} "
          f"{'row':<12} {'predicted':>9} {'measured':>8} {'error':>6}")
    errors = []
    for s in by_source(rows):
        for p in step_predictions(s):
            err = p.predicted_efficiency - p.measured_efficiency
            errors.append(abs(err))
            print(f"{p.source:<36} {p.method:<7} {p.fitted_on:<12} {p.cost_ms:>7.3f} "
                  f"{p.row.roofline.spec.label:<12} {p.predicted_efficiency:>9.2f} "
                  f"{p.measured_efficiency:>8.2f} {err:>+6.2f}")
    if errors:
        print(f"{len(errors)} rows predicted; efficiency error median "
              f"{statistics.median(errors):.2f}, worst {max(errors):.2f}; within 0.05: "
              f"{sum(e <= 0.05 for e in errors)}/{len(errors)}")


def two_part_table(rows: list[Anchor]) -> None:
    """The cost with a fixed part per drafting round and a part per forward, fitted on the rows
    at each method's two fewest step counts (one, with the fixed part assumed 0, where a source
    ran two), predicting its rows at other step counts; then a method's cost on one model, as a
    multiple of its drafter's roofline, predicting the same engine's row on another model (how
    a DFlash block is predicted). Errors per kind: chain, tree, block."""
    sources = by_source(rows)
    print()
    print("two-part cost (fixed per drafting round + per forward), fitted on the rows at a method's")
    print("two fewest step counts (a tree counted by its forwards; its verify width and node count")
    print("are in its roofline), predicting its rows at other step counts:")
    header = (f"{'source, model, dtype':<36} {'kind':<6} {'fitted on':<44} {'row':<12} "
              f"{'predicted':>9} {'measured':>8} {'error':>6}")
    print(header)
    by_kind: dict[str, list[float]] = defaultdict(list)

    def show(p: StepPrediction) -> None:
        err = p.predicted_efficiency - p.measured_efficiency
        by_kind[kind(p.row)].append(abs(err))
        print(f"{p.source:<36} {kind(p.row):<6} {p.fitted_on:<44} "
              f"{p.row.roofline.spec.label:<12} {p.predicted_efficiency:>9.2f} "
              f"{p.measured_efficiency:>8.2f} {err:>+6.2f}")

    for s in sources:
        for p in two_part_predictions(s):
            show(p)
    print()
    print("the same engine's method on another model: its drafting cost fitted on one model as a")
    print("multiple of that drafter's roofline time, predicting the other model's row:")
    print(header)
    for p in cross_model_predictions(sources):
        show(p)
    errors = [e for es in by_kind.values() for e in es]
    if errors:
        parts = ", ".join(f"{k} {sum(e <= 0.05 for e in es)}/{len(es)}"
                          for k, es in by_kind.items())
        print(f"{len(errors)} rows predicted; within 0.05: {sum(e <= 0.05 for e in errors)}/"
              f"{len(errors)} ({parts}); median error {statistics.median(errors):.2f}, worst "
              f"{max(errors):.2f}")


def layout_table(rows: list[Anchor]) -> None:
    """The rows served across GPUs and nodes at a stated layout: per layout, what bounds the
    slowest GPU's round, and the efficiency."""
    laid = [a for a in rows if a.roofline.layout is not None]
    if not laid:
        return
    print()
    print("rows at a layout (the slowest GPU's round; each part per round):")
    print(f"{'group':<18} {'hardware':<9} {'layout':<26} {'batch':>6} {'round ms':>9} "
          f"{'bound':<11} {'all-to-all':>10} {'allreduce':>9} {'eff':>5}")
    for a in laid:
        r, layout = a.roofline, a.roofline.layout
        assert layout is not None
        label = layout.label() + (" overlap" if layout.overlap else "")
        print(f"{a.group:<18} {a.row['hw']:<9} {label:<26} {r.batch:>6} {r.round_ms:>9.2f} "
              f"{r.bound:<11} {r.components_ms.get('all_to_all', 0.0):>10.2f} "
              f"{r.components_ms['allreduce']:>9.2f} {a.efficiency:>5.2f}")


def main() -> None:
    rows = anchors()
    print(f"{'group':<18} {'hardware':<11} {'model':<14} {'spec':<12} {'accept':>6} "
          f"{'measured':>9} {'roofline':>9} {'eff':>5}")
    for a in rows:
        print(f"{a.group:<18} {a.row['hw']:<11} {a.row['model']:<14} "
              f"{a.roofline.spec.label:<12} {a.accept:>6.2f} {float(a.row['tok_s']):>9.1f} "
              f"{a.expected_tok_s:>9.1f} {a.efficiency:>5.2f}")
    print()
    print("per source: no-speculation efficiency beside the speculative rows'")
    print(f"{'source, model, dtype':<36} {'no spec':>7} {'spec rows':>9} {'spec min':>8} "
          f"{'spec max':>8} {'gap median':>10} {'gap worst':>9} {'within 0.15':>11}")
    within = total = 0
    for s in by_source(rows):
        effs = [a.efficiency for a in s.speculative]
        ok = sum(abs(g) <= GAP_TARGET for g in s.gaps)
        within, total = within + ok, total + len(s.gaps)
        print(f"{s.label:<36} {s.baseline.efficiency:>7.2f} {len(effs):>9} {min(effs):>8.2f} "
              f"{max(effs):>8.2f} {s.median_gap:>+10.2f} {max(s.gaps, key=abs):>+9.2f} "
              f"{ok:>5}/{len(s.gaps):<5}")
    print()
    print("engine cost per extra draft step (chains run at 3+ step counts): measured vs roofline")
    for s in by_source(rows):
        for method, measured, modelled, n in step_slopes(s.speculative):
            print(f"{s.label:<36} {method:<7} {n:>2} rows: measured {measured:6.3f} ms/step, "
                  f"roofline {modelled:6.3f} ms/step")
    print()
    print("with that engine cost as [roofline] draft_step_ms (fitted on these same rows: it shows")
    print("what the knob does for one min_efficiency across step counts, it predicts nothing):")
    for s in by_source(rows):
        for method, measured, modelled, _ in step_slopes(s.speculative):
            extra = max(0.0, measured - modelled)
            effs = [float(a.row["tok_s"]) / a.roofline.what_if(draft_step_ms=extra).tok_s(a.accept)
                    for a in s.speculative if a.roofline.spec.method == method]
            print(f"{s.label:<36} {method:<7} draft_step_ms {extra:5.3f}: efficiency "
                  f"{min(effs):.2f}-{max(effs):.2f} against {s.baseline.efficiency:.2f} without "
                  "speculation")
    predictions_table(rows)
    two_part_table(rows)
    layout_table(rows)
    top = max(a.efficiency for a in rows)
    print()
    print(f"headline: {len(rows)} rows, {sum(a.speculative for a in rows)} speculative from "
          f"{len({s.group for s in by_source(rows)})} sources; max efficiency {top:.2f} (never above 1.00: the "
          f"roofline is a ceiling); speculative rows within {GAP_TARGET} of their source's "
          f"no-speculation row: {within}/{total}")


if __name__ == "__main__":
    main()
