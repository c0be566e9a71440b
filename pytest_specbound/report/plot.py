"""tok/s against accept length: the roofline and floor lines, each class's measured point with its
intervals (accept and tok/s, from the last look) and its accept band; labels never overlap.
Where classes ran at several concurrency levels, a second panel: per-user tok/s against
concurrency, with the roofline and the floor at each level. Where classes were also measured
without speculation, a third: the speedup against concurrency, with its intervals, the line at 1,
the speedup floor and the level where the speedup crosses 1. One row of panels per hardware."""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pytest_specbound.atomic import replacing
from pytest_specbound.errors import ConfigError
from pytest_specbound.gate.verdicts.result import ClassResult
from pytest_specbound.gate.verdicts.thresholds import EFFICIENCY, SPEEDUP


def write_plot(path: Path, results: Sequence[ClassResult]) -> list[str]:
    """The plot, one row of panels per hardware (runs merged by ``specbound report`` plot
    each runner's hardware in its own row); returns the panels' titles, with each panel's
    legend entries after a colon."""
    plt = pyplot()
    hardware = sorted({r.hardware for r in results}) or [""]
    leveled = any(r.concurrency > 1 for r in results)
    speedups = any(r.speedup is not None for r in results)
    cols = 1 + 2 * leveled + speedups
    fig, axes = plt.subplots(len(hardware), cols, figsize=(6.5 * cols + 0.5, 4.5 * len(hardware)),
                             squeeze=False)
    for row, hw in enumerate(hardware):
        on_hw = [r for r in results if r.hardware == hw]
        title = f" on {hw}" if len(hardware) > 1 else ""
        _accept_panel(axes[row][0], fig, on_hw, title)
        if leveled:
            _concurrency_panel(axes[row][1], on_hw, title)
            _pareto_panel(axes[row][2], on_hw, title)
        if speedups:
            _speedup_panel(axes[row][cols - 1], on_hw, title)
    fig.tight_layout()
    with replacing(path) as tmp:
        fig.savefig(tmp, dpi=110, bbox_inches="tight", format="png")
    panels = [f"{ax.get_title()}: " + ", ".join(t.get_text() for t in
                                               (ax.get_legend().get_texts() if ax.get_legend()
                                                else ()))
              for row in axes for ax in row]
    plt.close(fig)
    return panels


def pyplot() -> Any:
    """matplotlib's pyplot on the Agg backend; a one-line error without matplotlib."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise ConfigError("plots need matplotlib: pip install 'pytest-specbound[plot]'") from None
    return plt


def _accept_panel(ax: Any, fig: Any, results: Sequence[ClassResult], title: str = "") -> None:
    """tok/s against accept length: roofline and floor lines, each class with its intervals and
    its accept band (shaded at its measured rate), labels placed so that none overlap."""
    groups: dict[tuple[str, str, int], list[ClassResult]] = {}
    points: list[tuple[float, float, str]] = []
    for r in results:
        if r.roofline and r.decode_tok_s is not None:
            groups.setdefault((r.budget, r.hardware, r.roofline.batch), []).append(r)
    for (budget, hw, batch), rs in groups.items():
        roof = rs[0].roofline
        assert roof is not None
        round_ms = roof.physics_round_ms  # a level's measured prefill differs per class
        xs = [1 + i * (roof.max_accept - 1) / 50 for i in range(51)]
        label = f"{Path(budget).stem} on {hw}" + (f", batch {batch}" if batch > 1 else "")
        if any(r.roofline and r.roofline.prefill_ms for r in rs):
            label += ", before others' prefill"
        ax.plot(xs, [x / round_ms * 1e3 for x in xs], label=f"roofline ({label})")
        effs = [e for e in (r.limit(EFFICIENCY) for r in rs) if e]
        if effs:
            e = min(effs)
            ax.plot(xs, [e * x / round_ms * 1e3 for x in xs], "--",
                    label=f"floor {e:.2f} x roofline")
        for r in rs:
            color = "tab:green" if r.status == "pass" else "tab:red"
            x, y = r.accept_length or 1.0, r.decode_tok_s or 0.0
            if r.accept_band:  # the band, drawn at the class's measured rate
                ax.hlines(y, *r.accept_band, colors=color, alpha=0.25, linewidth=6)
            b = r.bounds or {}
            xerr = _err(x, b.get("accept_length"))
            yerr = _err(y, b.get("decode_tok_s"))
            ax.errorbar([x], [y], xerr=xerr, yerr=yerr, fmt="o", color=color, capsize=3,
                        zorder=3)
            level = f" c{r.concurrency}" if r.concurrency > 1 else ""
            points.append((x, y, f"{r.class_name}{level} {y:.0f}"))
    ax.autoscale_view()
    scale = 72.0 / fig.dpi  # display pixels -> points, the unit of annotation offsets
    shown = [ax.transData.transform((x, y)) * scale for x, y, _ in points]
    for (x, y, text), dy in zip(points, label_offsets([(float(a), float(b)) for a, b in shown]),
                                strict=True):
        ax.annotate(text, (x, y), textcoords="offset points", xytext=(6, dy), fontsize=8)
    ax.set_xlabel("accept length (tokens per verify step)")
    ax.set_ylabel("decode tok/s")
    ax.set_title("specbound: measured vs roofline" + title)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)


def _concurrency_panel(ax: Any, results: Sequence[ClassResult], title: str = "") -> None:
    """Per-user decode tok/s against concurrency per class, with the roofline (per sequence, at
    batch = level and the measured accept) and the floor at each measured level."""
    series: dict[tuple[str, str, str], list[ClassResult]] = {}
    for r in results:
        if r.decode_tok_s is not None and r.verdict.roofline_tok_s is not None:
            series.setdefault((r.budget, r.hardware, r.class_name), []).append(r)
    for (budget, hw, name), rs in series.items():
        rs = sorted(rs, key=lambda r: r.concurrency)
        xs = [r.concurrency for r in rs]
        line = ax.plot(xs, [r.verdict.roofline_tok_s for r in rs], "-", alpha=0.6,
                       label=f"roofline {name} ({Path(budget).stem} on {hw})")
        color = line[0].get_color()
        floors = [r.verdict.floor_tok_s for r in rs]
        if any(f is not None for f in floors):
            ax.plot(xs, [f if f is not None else math.nan for f in floors], "--", color=color,
                    alpha=0.6, label=f"floor {name}")
        for r in rs:
            y = r.decode_tok_s or 0.0
            marker = "tab:green" if r.status == "pass" else "tab:red"
            ax.errorbar([r.concurrency], [y], yerr=_err(y, (r.bounds or {}).get("decode_tok_s")),
                        fmt="o", color=marker, capsize=3, zorder=3)
    _level_axis(ax, sorted({r.concurrency for rs in series.values() for r in rs}))
    _labels(ax, "concurrency (closed-loop streams = roofline batch)", "decode tok/s per user",
            "per-user tok/s vs concurrency" + title)


def _level_axis(ax: Any, levels: Sequence[int]) -> None:
    """Concurrency levels on a log2 axis, each level named."""
    ax.set_xscale("log", base=2)
    ax.set_xticks(levels, [str(n) for n in levels])
    ax.minorticks_off()


def _labels(ax: Any, x: str, y: str, title: str) -> None:
    ax.set_xlabel(x)
    ax.set_ylabel(y)
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)


def pareto_points(rs: Sequence[ClassResult]) -> tuple[list[tuple[float, float]],
                                                     list[tuple[float, float]]]:
    """(measured, frontier) points (aggregate tok/s per GPU, per-user tok/s) across a class's
    levels: the frontier is the roofline at each level's batch and measured accept."""
    measured, bound = [], []
    for r in sorted(rs, key=lambda x: x.concurrency):
        gpus = _gpus(r)
        if r.decode_tok_s is not None and r.aggregate_tok_s is not None:
            measured.append((r.aggregate_tok_s / gpus, r.decode_tok_s))
        if r.verdict.roofline_tok_s is not None:
            bound.append((r.verdict.roofline_tok_s * r.concurrency / gpus,
                          r.verdict.roofline_tok_s))
    return measured, bound


def _gpus(r: ClassResult) -> int:
    hw = r.roofline.hardware if r.roofline else {}
    count = hw.get("count") if isinstance(hw, dict) else None
    return int(count) if isinstance(count, int) and hw.get("name") != "cpu" and count > 0 else 1


def _pareto_panel(ax: Any, results: Sequence[ClassResult], title: str = "") -> None:
    """Per-user tok/s against aggregate tok/s per GPU across each class's levels: the measured
    points with their intervals, and the physical frontier at the measured accept."""
    series: dict[tuple[str, str], list[ClassResult]] = {}
    for r in results:
        series.setdefault((r.budget, r.class_name), []).append(r)
    for (_, name), rs in series.items():
        measured, bound = pareto_points(rs)
        if not measured:
            continue
        line = ax.plot([x for x, _ in bound], [y for _, y in bound], "--", alpha=0.7,
                       label=f"roofline frontier {name}")
        color = line[0].get_color()
        for r, (x, y) in zip(sorted(rs, key=lambda v: v.concurrency), measured, strict=False):
            b = r.bounds or {}
            gpus = _gpus(r)
            agg = b.get("aggregate_tok_s")
            ax.errorbar([x], [y], yerr=_err(y, b.get("decode_tok_s")),
                        xerr=_err(x, (agg[0] / gpus, agg[1] / gpus) if agg else None),
                        fmt="o", color=color, capsize=3)
            ax.annotate(f"c{r.concurrency}", (x, y), textcoords="offset points", xytext=(5, 4),
                        fontsize=7)
    _labels(ax, "aggregate decode tok/s per GPU", "decode tok/s per user",
            "throughput vs interactivity" + title)


def crossing_level(points: Sequence[tuple[int, float]]) -> float | None:
    """The concurrency where the speedup crosses 1, interpolated on log2(concurrency) between
    the two measured levels around it (None: it does not cross)."""
    for (c0, s0), (c1, s1) in itertools.pairwise(points):
        if (s0 - 1) * (s1 - 1) < 0:
            t = (1 - s0) / (s1 - s0)
            return float(2 ** (math.log2(c0) + t * (math.log2(c1) - math.log2(c0))))
    return None


def _speedup_panel(ax: Any, results: Sequence[ClassResult], title: str = "") -> None:
    """Speedup (with speculation over without, per user) against concurrency per class."""
    series: dict[tuple[str, str], list[ClassResult]] = {}
    for r in results:
        if r.speedup is not None:
            series.setdefault((r.budget, r.class_name), []).append(r)
    for (budget, name), rs in series.items():
        rs = sorted(rs, key=lambda r: r.concurrency)
        pts = [(r.concurrency, r.speedup or 0.0) for r in rs]
        errs = [_err(s, r.speedup_bounds) or [[0.0], [0.0]] for r, (_, s) in zip(rs, pts,
                                                                                   strict=True)]
        line = ax.errorbar([c for c, _ in pts], [s for _, s in pts],
                           yerr=[[e[0][0] for e in errs], [e[1][0] for e in errs]], fmt="o-",
                           capsize=3, label=f"{name} ({Path(budget).stem})")
        floor = next((s for s in (r.limit(SPEEDUP) for r in rs) if s is not None), None)
        if floor is not None:
            ax.axhline(floor, linestyle="--", color=line[0].get_color(), alpha=0.5,
                       label=f"{SPEEDUP} {floor:g} ({name})")
        cross = crossing_level(pts)
        if cross is not None:
            ax.axvline(cross, linestyle=":", color=line[0].get_color(), alpha=0.7,
                       label=f"{name} crosses 1 near c{cross:.1f}")
    ax.axhline(1.0, color="black", linewidth=0.8)
    _level_axis(ax, sorted({r.concurrency for rs in series.values() for r in rs}))
    _labels(ax, "concurrency", "speedup (with speculation / without)",
            "does speculation pay?" + title)


def _err(value: float, interval: tuple[float, float] | None) -> list[list[float]] | None:
    """An asymmetric error bar from an interval (None when there is none, or it is unbounded)."""
    if not interval or not all(math.isfinite(v) for v in interval):
        return None
    return [[max(0.0, value - interval[0])], [max(0.0, interval[1] - value)]]


LABEL_PT = 11.0  # one line of 8-point text


def label_offsets(points: Sequence[tuple[float, float]], width: float = 70.0) -> list[float]:
    """Vertical offsets for labels at ``points`` (display positions, in points) so that no two
    labels closer than ``width`` horizontally overlap: each moves down until it is clear."""
    placed: list[tuple[float, float]] = []  # (x, y of the label's baseline)
    offsets = [0.0] * len(points)
    for i in sorted(range(len(points)), key=lambda k: -points[k][1]):  # the highest point first
        x, y = points[i]
        dy = -12.0
        while any(abs(x - px) < width and abs((y + dy) - py) < LABEL_PT for px, py in placed):
            dy -= LABEL_PT
        placed.append((x, y + dy))
        offsets[i] = dy
    return offsets
