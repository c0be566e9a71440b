"""Propose bands and floors from a measurement, as an edit of the budget file (review the diff)."""

from __future__ import annotations

import math
import re
from collections.abc import Mapping

from pytest_specbound.gate.result import ClassResult
from pytest_specbound.values import DEFAULT_RESOLUTION


def propose(result: ClassResult) -> dict[str, float | list[float]]:
    """Band and floor for one class result (from ``runner.run_class``): TOML key -> value.

    Each threshold sits one resolution beyond the measured interval (the accept band's edges
    outside it, the efficiency floor under it): the same server then lies at least a resolution
    inside every threshold, where the sequential verdict passes it with probability at least
    1 - alpha and decides in few requests.
    """
    r = result.resolution or DEFAULT_RESOLUTION
    b = result.bounds or {}
    out: dict[str, float | list[float]] = {}
    acc = b.get("accept_length")
    if acc and all(math.isfinite(x) for x in acc):
        low = max(1.0, math.floor(acc[0] * (1 - r) * 20) / 20)
        high = math.ceil(acc[1] * (1 + r) * 20) / 20
        cap = result.roofline.max_accept if result.roofline else None
        out["accept"] = [round(low, 2), round(min(high, cap) if cap else high, 2)]
    eff = b.get("efficiency")
    if eff and math.isfinite(eff[0]):
        out["min_efficiency"] = max(0.0, math.floor(eff[0] * (1 - r) * 100) / 100)
    return out


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
          after: str | None = None) -> str:
    """Set ``key = value`` inside ``[table]``, keeping every other line and comment as it was.

    A table that does not exist is added after the block of ``[after]`` and its sub-tables
    (``[classes.NAME.c4]`` after ``[classes.NAME]``); without ``after`` the text is unchanged.
    """
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
                comment = m.group(2) or ""
                lines[i] = f"{m.group(1)}{key} = {_format(value)}{comment}\n"
                break
        else:
            insert = end
            while insert > start + 1 and not lines[insert - 1].strip():
                insert -= 1
            lines.insert(insert, f"{key} = {_format(value)}\n")
            end += 1
    return "".join(lines)
