"""Propose bands and floors from a measurement, as an edit of the budget file (review the diff)."""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping, Sequence

from pytest_specbound.gate.pipeline.pool import ServerPool
from pytest_specbound.gate.schema.budget import Budget
from pytest_specbound.gate.schema.class_budget import ClassBudget
from pytest_specbound.gate.schema.settings import Settings
from pytest_specbound.gate.verdicts.result import ClassResult
from pytest_specbound.gate.verdicts.thresholds import EFFICIENCY
from pytest_specbound.physics.hardware import Hardware
from pytest_specbound.values import DEFAULT_RESOLUTION


def measure_budget(budget: Budget, hw: Hardware, settings: Settings, pool: ServerPool,
                   runs: Sequence[tuple[str, ClassBudget]],
                   say: Callable[[str], None]) -> list[ClassResult]:
    """Every class at every level, in order, as the gate runs them (gate/pipeline/run.py): the twins
    without speculation first where the budget (or ``settings.speedup``) asks for them."""
    from pytest_specbound.gate.pipeline.run import GateRun

    gate = GateRun(hw, settings, pool, say=say)
    wanted = [(budget, name, level) for name, cls in runs for level in cls.concurrency]
    gate.prepare(wanted)
    return [gate.run(b, name, level) for b, name, level in wanted]


def propose(result: ClassResult,
            draft_step_ms: float | None = None) -> dict[str, float | list[float]]:
    """Band and floor for one class result (from ``runner.run_class``): TOML key -> value.

    Each threshold sits one resolution beyond the measured interval (the accept band's edges
    outside it, the efficiency floor under it): the same server then lies at least a resolution
    inside every threshold, where the sequential verdict passes it with probability at least
    1 - alpha and decides in few requests. With ``draft_step_ms`` (proposed beside it) the
    floor is against the roofline that includes it.
    """
    r = result.resolution or DEFAULT_RESOLUTION
    b = dict(result.bounds or {})
    scale = roofline_scale(result, draft_step_ms)
    if "efficiency" in b:
        b["efficiency"] = (b["efficiency"][0] * scale, b["efficiency"][1] * scale)
    out: dict[str, float | list[float]] = {}
    acc = b.get("accept_length")
    if acc and all(math.isfinite(x) for x in acc):
        low = max(1.0, math.floor(acc[0] * (1 - r) * 20) / 20)
        high = math.ceil(acc[1] * (1 + r) * 20) / 20
        cap = result.roofline.max_accept if result.roofline else None
        out["accept"] = [round(low, 2), round(min(high, cap) if cap else high, 2)]
    eff = b.get("efficiency")
    if eff and math.isfinite(eff[0]):
        out[EFFICIENCY] = max(0.0, math.floor(eff[0] * (1 - r) * 100) / 100)
    return out


def roofline_scale(result: ClassResult, draft_step_ms: float | None) -> float:
    """How the efficiency moves when the roofline's cost per draft forward becomes
    ``draft_step_ms``: the round grows by the forwards times the change."""
    roof = result.roofline
    if draft_step_ms is None or roof is None or roof.round_ms <= 0:
        return 1.0
    return (roof.round_ms + roof.draft_forwards * (draft_step_ms - roof.draft_step_ms)) \
        / roof.round_ms


def draft_cost_proposal(results: list[ClassResult], hardware: str, backend: str,
                        day: str) -> tuple[float, str] | None:
    """``[roofline] draft_step_ms`` from the lowest level's measured cost per draft forward (of
    the first class that has one), and its origin for the comment beside it."""
    found = sorted((r for r in results if r.draft_step_ms and isinstance(
        r.draft_step_ms.get("ms"), (int, float))), key=lambda r: r.concurrency)
    if not found:
        return None
    r = found[0]
    cost = r.draft_step_ms or {}
    ms = max(0.0, round(float(cost["ms"]), 3))  # type: ignore[arg-type]
    server = " ".join(x for x in (backend, r.server.version) if x and x != "auto") or "the server"
    return ms, (f"measured on {hardware} with {server}, {day}, at concurrency {r.concurrency}: "
                f"{float(cost['low']):.3f}-{float(cost['high']):.3f} ms "  # type: ignore[arg-type]
                f"({r.class_name})")


def _format(value: float | list[float]) -> str:
    if isinstance(value, list):
        return "[" + ", ".join(f"{v:g}" for v in value) + "]"
    return f"{value:.2f}"


def describe(values: Mapping[str, float | list[float]]) -> str:
    """The proposal as the TOML lines it writes, joined: ``accept = [2.6, 3.4], ...``."""
    return ", ".join(f"{key} = {_format(value)}" for key, value in values.items())


def _find(lines: list[str], table: str) -> int | None:
    return next((i for i, ln in enumerate(lines) if ln.split("#")[0].strip() == f"[{table}]"),
                None)


def apply(text: str, table: str, values: Mapping[str, float | list[float]],
          after: str | None = None, comments: Mapping[str, str] | None = None) -> str:
    """Set ``key = value`` inside ``[table]``, keeping every other line and comment as it was.

    A table that does not exist is added after the block of ``[after]`` and its sub-tables
    (``[classes.NAME.c4]`` after ``[classes.NAME]``); without ``after`` the text is unchanged.
    ``comments``: a key's comment, written beside it (replacing the one there).
    """
    notes = {k: f"  # {c}" for k, c in (comments or {}).items()}
    lines = text.splitlines(keepends=True)
    start = _find(lines, table)
    if start is None and values and after is not None and (anchor := _find(lines, after)) is not None:
        end = anchor + 1
        prefix = f"[{after}."
        while end < len(lines):
            head = lines[end].split("#")[0].strip()
            if head.startswith("[") and not head.startswith(prefix):
                break
            end += 1
        while end > anchor + 1 and not lines[end - 1].strip():
            end -= 1
        if end > 0 and not lines[end - 1].endswith("\n"):
            lines[end - 1] += "\n"
        lines[end:end] = ["\n", f"[{table}]\n"]
        start = end + 1
    if start is None:
        return text
    end = next((i for i in range(start + 1, len(lines)) if lines[i].lstrip().startswith("[")),
               len(lines))
    for key, value in values.items():
        pattern = re.compile(rf"^(\s*){re.escape(key)}\s*=.*?(\s*#.*)?$")
        for i in range(start + 1, end):
            m = pattern.match(lines[i].rstrip("\n"))
            if m:
                comment = notes.get(key, m.group(2) or "")
                lines[i] = f"{m.group(1)}{key} = {_format(value)}{comment}\n"
                break
        else:
            insert = end
            while insert > start + 1 and not lines[insert - 1].strip():
                insert -= 1
            lines.insert(insert, f"{key} = {_format(value)}{notes.get(key, '')}\n")
            end += 1
    return "".join(lines)


def proposed_text(text: str, budget: Budget, hardware: str,
                  runs: Sequence[tuple[str, ClassBudget]], results: Sequence[ClassResult],
                  say: Callable[[str], None]) -> str:
    """The budget text with every proposal applied (the measured draft cost in ``[roofline]``,
    each class's band and floor at each level), each said in one sentence."""
    import datetime

    cost = draft_cost_proposal(list(results), hardware, budget.server.backend,
                               datetime.date.today().isoformat())
    new = text
    if cost is not None:
        say(f"engine cost per draft forward: {cost[0]:g} ms ({cost[1]}); proposed in "
            "[roofline]: draft_step_ms")
        new = apply(new, "roofline", {"draft_step_ms": cost[0]}, after="server",
                    comments={"draft_step_ms": cost[1]})
    for result, (name, cls) in zip(results, [(n, c) for n, c in runs for _ in c.concurrency],
                                   strict=True):
        level = result.concurrency
        values = propose(result, cost[0] if cost else None)
        # the first level's figures are the class's own; each other level gets a table
        table = f"classes.{name}" if level == cls.concurrency[0] else f"classes.{name}.c{level}"
        at = f" at concurrency {level}" if cls.level_ids else ""
        speedup = f", speedup {result.speedup:.2f}x" if result.speedup is not None else ""
        say(f"{name}{at}: measured accept {_fmt(result.accept_length)}, efficiency "
            f"{_fmt(result.verdict.efficiency)}{speedup} over {result.samples} requests; "
            f"proposed in [{table}]: {describe(values) or 'nothing (no interval)'}")
        new = apply(new, table, values, after=f"classes.{name}")
    return new


def _fmt(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.2f}"
