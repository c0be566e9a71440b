"""``specbound history PATH...``: each class's accept, decode rate and efficiency across many
runs (the artifacts of successive CI runs), oldest first, by commit or date; a step between two
consecutive runs that the two-sample test confirms is marked as a change point."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from pytest_specbound.errors import SpecboundError
from pytest_specbound.gate.references.baseline import Key, key_of
from pytest_specbound.gate.verdicts.result import ClassResult
from pytest_specbound.report.compare import decide_change


@dataclass(frozen=True)
class Point:
    """One run of one class at one level."""

    when: str  # the run's start (ISO)
    commit: str | None
    result: ClassResult
    step: str = ""  # "regressed" / "improved": confirmed against the run before

    @property
    def label(self) -> str:
        return (self.commit or "")[:7] or self.when[:10]


def runs(paths: Sequence[Path]) -> list[tuple[str, str | None, list[ClassResult]]]:
    """(start, commit, results) of every results file under ``paths``, oldest first."""
    files = [f for p in paths for f in (sorted(p.glob("**/*.json")) if p.is_dir() else [p])]
    out = []
    for f in files:
        try:
            doc = json.loads(f.read_text(encoding="utf-8"))
            results = [ClassResult.from_json(e) for e in doc["results"]]
        except (OSError, ValueError, KeyError, TypeError) as exc:
            if f in paths:
                raise SpecboundError(f"{f}: not a specbound results file ({exc})") from None
            continue  # inside a folder: other JSON files are not ours
        run = doc.get("run")
        found = run.get("identity") if isinstance(run, dict) else None
        ident: dict[str, object] = found if isinstance(found, dict) else {}
        when = str(ident.get("created") or doc.get("created") or "")
        sha = ident.get("commit")
        out.append((when, str(sha) if sha else None, [r for r in results if not r.partial]))
    if not out:
        raise SpecboundError(f"{', '.join(map(str, paths))}: no specbound results files")
    return sorted(out, key=lambda run: run[0])


def series(paths: Sequence[Path], confidence: float | None = None,
           resolution: float | None = None) -> dict[Key, list[Point]]:
    """Per class and level, its runs in time order with the confirmed steps marked (each step
    decided at the later run's own confidence and resolution unless given)."""
    found: dict[Key, list[Point]] = {}
    for when, commit, results in runs(paths):
        for r in results:
            points = found.setdefault(key_of(r), [])
            step = ""
            if points:
                _, _, decision = decide_change(points[-1].result, r, confidence, resolution)
                step = decision if decision in ("regressed", "improved") else ""
            points.append(Point(when, commit, r, step))
    return found


def table(found: dict[Key, list[Point]]) -> str:
    lines = []
    for key, points in found.items():
        lines.append(f"{key[0]}::{key[1]} c{key[2]} on {key[3]}")
        lines.append(f"  {'run':<12} {'date':<10} {'accept':>6} {'tok/s':>8} {'interval':>17} "
                     f"{'efficiency':>10} {'floor':>7}  step")
        for p in points:
            r = p.result
            b = (r.bounds or {}).get("decode_tok_s")
            interval = f"[{b[0]:.1f}, {b[1]:.1f}]" if b else "-"
            lines.append(f"  {p.label:<12} {p.when[:10]:<10} {_n(r.accept_length, '.2f'):>6} "
                         f"{_n(r.decode_tok_s, '.1f'):>8} {interval:>17} "
                         f"{_n(r.verdict.efficiency, '.2f'):>10} "
                         f"{_n(r.verdict.floor_tok_s, '.1f'):>7}  {p.step.upper()}")
    return "\n".join(lines)


def _n(v: float | None, spec: str) -> str:
    return "-" if v is None else format(v, spec)


def write_trend(path: Path, found: dict[Key, list[Point]]) -> None:
    """One panel per class and level: decode tok/s per run with its interval, the
    roofline-derived floor, and the confirmed change points."""
    from pytest_specbound.atomic import replacing
    from pytest_specbound.report.plot import pyplot

    plt = pyplot()
    fig, axes = plt.subplots(len(found), 1, figsize=(8, 3.2 * len(found)), squeeze=False)
    for ax, (key, points) in zip((row[0] for row in axes), found.items(), strict=True):
        xs = list(range(len(points)))
        ys = [p.result.decode_tok_s or 0.0 for p in points]
        lows = [y - ((p.result.bounds or {}).get("decode_tok_s") or (y, y))[0]
                for y, p in zip(ys, points, strict=True)]
        highs = [((p.result.bounds or {}).get("decode_tok_s") or (y, y))[1] - y
                 for y, p in zip(ys, points, strict=True)]
        ax.errorbar(xs, ys, yerr=[lows, highs], fmt="o-", capsize=3, label="decode tok/s")
        floors = [p.result.verdict.floor_tok_s for p in points]
        if any(f is not None for f in floors):
            ax.plot(xs, [f if f is not None else float("nan") for f in floors], "--",
                    label="floor (roofline x efficiency floor)")
        for x, p in zip(xs, points, strict=True):
            if p.step:
                ax.axvline(x - 0.5, color="tab:red" if p.step == "regressed" else "tab:green",
                           linestyle=":", label=f"{p.step} at {p.label}")
        ax.set_xticks(xs, [p.label for p in points], rotation=30, fontsize=7)
        ax.set_title(f"{key[0]}::{key[1]} c{key[2]} on {key[3]}")
        ax.set_ylabel("decode tok/s per user")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    fig.tight_layout()
    with replacing(path) as tmp:
        fig.savefig(tmp, dpi=110, bbox_inches="tight", format="png")
    plt.close(fig)
