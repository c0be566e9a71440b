"""The speculation plan as a table (per level, every K's predicted rate and speedup with their
intervals, the measured and recommended K marked, the confirmation) and as a plot (speedup
against K per level: the predicted band, the measured points)."""

from __future__ import annotations

from pathlib import Path

from pytest_specbound.advisers.spec_plan import LevelPlan
from pytest_specbound.advisers.spec_sweep import SpecPlan


def render_plan(plan: SpecPlan) -> str:
    lines = [f"speculation plan: {plan.budget}::{plan.class_name} on {plan.hardware}, measured "
             f"at K={' and K='.join(map(str, plan.measured_steps))} and without speculation; "
             f"{plan.launches} launches, {plan.requests} requests"]
    for level in plan.levels:
        lines += _level_lines(level, plan.measured_steps)
    return "\n".join(lines) + "\n"


def _level_lines(level: LevelPlan, measured: tuple[int, ...]) -> list[str]:
    best = level.recommended
    moved = "" if level.base_drift is None else \
        f" (its two blocks {level.base_drift:+.0%} apart, pooled)" if level.base_blocks < 3 else \
        f" (its first two blocks {level.base_drift:+.0%} apart: measured a third time, the " \
        f"median block's)"
    out = ["", f"concurrency {level.concurrency}: without speculation {level.base.rate:.1f} "
               f"tok/s per user{moved}; acceptance {level.acceptance.how}; draft cost above the "
               f"roofline {level.cost.fixed_ms:.2f} ms a round + {level.cost.per_unit_ms:.2f} ms "
               f"a {level.unit}",
           f"{'K':>3}  {'accept':>6}  {'round ms':>8}  {'tok/s [interval]':>22}  "
           f"{'speedup [interval]':>20}"]
    for p in level.predictions:
        mark = ("  measured" if p.steps in measured else "") + \
               ("  <- recommended" if p.steps == best else "")
        out.append(f"{p.steps:>3}  {p.accept:>6.2f}  {p.round_ms:>8.2f}  "
                   f"{p.rate:>7.1f} [{p.rate_bounds[0]:.1f}, {p.rate_bounds[1]:.1f}]".ljust(47)
                   + f"  {p.speedup:>5.2f}x [{p.speedup_bounds[0]:.2f}, "
                     f"{p.speedup_bounds[1]:.2f}]{mark}")
    if best == 0:
        out.append(f"recommended: no speculation at concurrency {level.concurrency} (the best "
                   f"K, {level.best.steps}, is predicted at {level.best.speedup:.2f}x)")
    else:
        out.append(f"recommended: K={best} at concurrency {level.concurrency}")
    c = level.confirmation
    predicted = level.at(c.measured.steps) if c else None
    if c is not None and predicted is not None:
        landed = c.landed(predicted)
        inside = "inside" if landed else "OUTSIDE"
        speedup = f", speedup {c.speedup:.2f}x" if c.speedup is not None else ""
        slower = "" if landed or c.speedup is None or c.speedup >= 1.0 else \
            ": it ran slower than without speculation; measure again before deploying it"
        out.append(f"confirmed: K={c.measured.steps} measured {c.measured.rate:.1f} tok/s per "
                   f"user{speedup}, {inside} the predicted [{predicted.rate_bounds[0]:.1f}, "
                   f"{predicted.rate_bounds[1]:.1f}]{slower}")
    return out


def write_plan_plot(plan: SpecPlan, path: Path) -> None:
    """Speedup against K, one line and band per level, the measured points on it."""
    from pytest_specbound.atomic import replacing
    from pytest_specbound.report.plot import pyplot

    plt = pyplot()
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for level in plan.levels:
        ks = [p.steps for p in level.predictions]
        line = ax.plot(ks, [p.speedup for p in level.predictions],
                       label=f"predicted at concurrency {level.concurrency}")[0]
        ax.fill_between(ks, [p.speedup_bounds[0] for p in level.predictions],
                        [p.speedup_bounds[1] for p in level.predictions],
                        color=line.get_color(), alpha=0.15)
        ax.scatter([m.steps for m in level.measured],
                   [m.rate / level.base.rate for m in level.measured], color=line.get_color(),
                   marker="o", zorder=3)
        if level.confirmation is not None:
            c = level.confirmation.measured
            ax.scatter([c.steps], [c.rate / level.base.rate], color=line.get_color(),
                       marker="*", s=120, zorder=3,
                       label=f"confirmed K={c.steps} at concurrency {level.concurrency}")
    ax.axhline(1.0, color="grey", lw=0.8, ls="--")
    ax.set_xlabel("draft step count K")
    ax.set_ylabel("speedup over no speculation")
    ax.set_title(f"{plan.class_name} on {plan.hardware}: measured (dots), predicted (bands)")
    ax.legend(fontsize=8)
    fig.tight_layout()
    with replacing(path) as tmp:
        fig.savefig(tmp, dpi=110, format="png")
    plt.close(fig)
