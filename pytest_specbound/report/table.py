"""The summary table (terminal and markdown) of class results."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

HEADERS = ("class", "hardware", "accept [band]", "tok/s", "floor", "roofline", "efficiency",
           "verdict")


def _num(value: Any, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def rows(results: Sequence[dict[str, Any]]) -> list[tuple[str, ...]]:
    out: list[tuple[str, ...]] = []
    for r in results:
        band = r.get("accept_band")
        accept = _num(r.get("accept_length"), ".2f")
        if band:
            accept += f" [{band[0]:g}, {band[1]:g}]"
        if r.get("accept_source") == "estimate":
            accept += " (est.)"
        out.append((
            f"{basename(r['budget'])}::{r['class']}", r["hardware"], accept,
            _num(r.get("decode_tok_s"), ".1f"), _num(r.get("floor_tok_s"), ".1f"),
            _num(r.get("roofline_tok_s"), ".1f"), _num(r.get("efficiency"), ".2f"),
            str(r.get("verdict", "?")).upper(),
        ))
    return out


def basename(path: str) -> str:
    return path.replace("\\", "/").rsplit("/", 1)[-1]


NOTES = ("clock_note", "server_clock_note", "untimed_note")


def notes(results: Sequence[dict[str, Any]]) -> list[str]:
    """One line per timing note (clocks that disagree, server-timed or retried requests)."""
    return [f"{basename(r['budget'])}::{r['class']}[{r['hardware']}]: {r[k]}"
            for r in results for k in NOTES if r.get(k)]


def terminal(results: Sequence[dict[str, Any]]) -> str:
    body = rows(results)
    widths = [max(len(h), *(len(row[i]) for row in body)) for i, h in enumerate(HEADERS)]
    line = "  ".join(h.ljust(w) for h, w in zip(HEADERS, widths, strict=False))
    out = [line, "  ".join("-" * w for w in widths)]
    out += ["  ".join(c.ljust(w) for c, w in zip(row, widths, strict=False)) for row in body]
    out += [f"note: {line}" for line in notes(results)]
    return "\n".join(out)


def markdown(results: Sequence[dict[str, Any]]) -> str:
    out = ["### specbound", "", "| " + " | ".join(HEADERS) + " |",
           "|" + "|".join("---" for _ in HEADERS) + "|"]
    out += ["| " + " | ".join(row) + " |" for row in rows(results)]
    out += [f"\n- note: {line}" if i == 0 else f"- note: {line}"
            for i, line in enumerate(notes(results))]
    failed = [r for r in results if r.get("verdict") not in ("pass", "skip")]
    for r in failed:
        out.append("")
        out.append(f"**{basename(r['budget'])}::{r['class']}[{r['hardware']}]** "
                   f"{str(r.get('verdict')).upper()}")
        out += [f"- {line}" for line in r.get("text") or []]
    return "\n".join(out) + "\n"
