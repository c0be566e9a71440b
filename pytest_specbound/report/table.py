"""The summary table (terminal and markdown) of class results."""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence

from pytest_specbound.gate.verdicts.result import ClassResult, basename
from pytest_specbound.gate.verdicts.thresholds import SPEEDUP as SPEEDUP_KEY
from pytest_specbound.gate.verdicts.thresholds import report_lines
from pytest_specbound.measure.measurement import Measurement

HEADERS = ("class", "hardware", "conc", "accept [band]", "tok/s", "floor", "roofline",
           "efficiency", "verdict")
AGGREGATE = "aggregate"  # a column only where some result ran above concurrency 1
SPEEDUP = "speedup [interval]"  # a column only where some class was measured without speculation


def headers(results: Sequence[ClassResult]) -> tuple[str, ...]:
    """The table's columns: tok/s is per user; the aggregate appears with concurrency > 1, the
    speedup where a class was also measured without speculation."""
    cols: tuple[str, ...] = HEADERS
    if any(r.concurrency > 1 for r in results):
        i = cols.index("tok/s") + 1
        cols = (*cols[:i], AGGREGATE, *cols[i:])
    if any(r.base is not None for r in results):
        i = cols.index("efficiency") + 1
        cols = (*cols[:i], SPEEDUP, *cols[i:])
    return cols


def speedup_text(r: ClassResult) -> str:
    """``1.14x [1.01, 1.28]`` (``>= 1.1`` appended where the class sets a minimum)."""
    if r.speedup is None:
        return "-"
    interval = f" [{r.speedup_bounds[0]:.2f}, {r.speedup_bounds[1]:.2f}]" \
        if r.speedup_bounds else ""
    least = r.limit(SPEEDUP_KEY)
    floor = f" >= {least:g}" if least is not None else ""
    return f"{r.speedup:.2f}x{interval}{floor}"


def _num(value: float | None, spec: str = ".2f") -> str:
    return "-" if value is None else format(value, spec)


def rows(results: Sequence[ClassResult]) -> list[tuple[str, ...]]:
    cols = headers(results)
    with_aggregate, with_speedup = AGGREGATE in cols, SPEEDUP in cols
    out: list[tuple[str, ...]] = []
    for r in results:
        accept = _num(r.accept_length, ".2f")
        if r.accept_band:
            accept += f" [{r.accept_band[0]:g}, {r.accept_band[1]:g}]"
        if r.pin_accept is not None:
            accept += f" (pinned {r.pin_accept:g})"
        if r.accept_source == "estimate":
            accept += " (est.)"
        if r.accept_source == "window":
            accept += " (window)"
        v = r.verdict
        aggregate = (_num(r.aggregate_tok_s, ".1f"),) if with_aggregate else ()
        speedup = (speedup_text(r),) if with_speedup else ()
        sampled = r.sampling and float(str(r.sampling.get("temperature", 0))) > 0
        name = f"{basename(r.budget)}::{r.class_name}" + (
            " (" + ", ".join(f"{k} {v}" for k, v in r.sampling.items()) + ")" if sampled else "")
        out.append((
            name, r.hardware, str(r.concurrency), accept,
            _num(r.decode_tok_s, ".1f"), *aggregate, _num(v.floor_tok_s, ".1f"),
            _num(v.roofline_tok_s, ".1f"), _num(v.efficiency, ".2f"), *speedup, v.status.upper(),
        ))
    return out


def notes(results: Sequence[ClassResult]) -> list[str]:
    """One line per timing note (clocks that disagree, server-timed or retried requests)."""
    return [f"{r.label}: {note}" for r in results
            for note in (r.clock_note, r.server_clock_note, r.untimed_note) if note]


def workload_lines(results: Sequence[ClassResult]) -> list[str]:
    """Per class (once over its levels): what reading its prompt set skipped or replayed."""
    out: list[str] = []
    for r in results:
        notes = [str(n) for n in (r.workload or {}).get("notes") or ()]
        line = f"{basename(r.budget)}::{r.class_name} prompts: " + "; ".join(notes)
        if notes and line not in out:
            out.append(line)
    return out


def split_lines(results: Sequence[ClassResult]) -> list[str]:
    """Per class and level with prefill and decode apart: which side each figure is from."""
    return [f"{r.label}: " + "; ".join(str(n) for n in r.disaggregated.get("notes") or ())
            for r in results if r.disaggregated]


def speedup_lines(results: Sequence[ClassResult]) -> list[str]:
    """Per class: the base without speculation, where the speedup crosses 1, and the measured
    cost per draft forward at each level."""
    out: list[str] = []
    by_class: dict[str, list[ClassResult]] = {}
    for r in results:
        if r.base is not None:
            by_class.setdefault(f"{basename(r.budget)}::{r.class_name}", []).append(r)
    for name, rs in by_class.items():
        rs = sorted(rs, key=lambda x: x.concurrency)
        parts = [f"c{r.concurrency} {_num(r.base_decode_tok_s, '.1f')} tok/s" for r in rs]
        costs = [f"c{r.concurrency} {_draft_cost(r.draft_step_ms)}" for r in rs if r.draft_step_ms]
        line = f"{name} without speculation: {', '.join(parts)}"
        crossing = crossover(rs)
        if crossing:
            line += f"; {crossing}"
        if costs:
            line += f"; engine cost per draft forward above the roofline: {', '.join(costs)}"
        drifts = [f"c{r.concurrency} {_drift(r.base)}" for r in rs if _drift(r.base)]
        if drifts:
            line += ("; the twin's rate moved between its blocks before and after the class "
                     f"(drift, not speculation): {', '.join(drifts)}")
        out.append(line)
    return out


def slo_lines(results: Sequence[ClassResult]) -> list[str]:
    """Per class and level with an SLO: each limit's own line (gate/verdicts/thresholds.py)."""
    out = []
    for r in results:
        parts = report_lines(r.limits, r)
        if parts:
            out.append(f"{r.label}: " + "; ".join(parts))
    return out


def baseline_lines(results: Sequence[ClassResult]) -> list[str]:
    """Per class and level compared with the last accepted run: the changes and the decision."""
    out = []
    for r in results:
        b = r.baseline
        if not b:
            continue
        if "note" in b:
            out.append(f"{r.label}: {b['note']}")
            continue
        parts = [f"{name} {_change(b.get(key))}" for name, key in
                 (("decode", "decode_change"), ("accept", "accept_change")) if b.get(key)]
        regressed = "regressed" in r.verdict.reasons
        out.append(f"{r.label} vs {b.get('label')}: {', '.join(parts) or 'no figures'}"
                   + (": REGRESSED" if regressed else ""))
    return out


def _change(c: object) -> str:
    if not isinstance(c, Mapping):
        return "-"
    v, lo, hi = (c.get(k) for k in ("change", "low", "high"))
    if not all(isinstance(x, (int, float)) for x in (v, lo, hi)):
        return "-"
    return f"{v:+.1%} [{lo:+.1%}, {hi:+.1%}]"


def _drift(base: Mapping[str, object] | None) -> str | None:
    """The twin's move between its two blocks, where the drift check saw one."""
    d = base.get("drift") if base else None
    if not isinstance(d, Mapping) or not d.get("seen"):
        return None
    change, low, high = (d.get(k) for k in ("change", "low", "high"))
    if not all(isinstance(v, (int, float)) for v in (change, low, high)):
        return None
    return f"{change:+.1%} [{low:+.1%}, {high:+.1%}]"


def _draft_cost(cost: Mapping[str, object]) -> str:
    ms, low, high = (cost.get(k) for k in ("ms", "low", "high"))
    if not all(isinstance(v, (int, float)) for v in (ms, low, high)):
        return "-"
    why = cost.get("why")
    return f"{ms:.2f} ms [{low:.2f}, {high:.2f}]" + (f" ({why})" if why else "")


def crossover(rs: Sequence[ClassResult]) -> str | None:
    """Where the speedup crosses 1 across the class's levels (in level order), if it does."""
    pts = [(r.concurrency, r.speedup) for r in rs if r.speedup is not None]
    for (c0, s0), (c1, s1) in itertools.pairwise(pts):
        if (s0 - 1) * (s1 - 1) < 0:
            return f"speculation stops paying between c{c0} ({s0:.2f}x) and c{c1} ({s1:.2f}x)" \
                if s0 > 1 else f"speculation starts paying between c{c0} and c{c1}"
    if pts and all(s < 1 for _, s in pts):
        return "speculation does not pay at any measured level"
    return None


def terminal(results: Sequence[ClassResult]) -> str:
    body = rows(results)
    cols = headers(results)
    widths = [max(len(h), *(len(row[i]) for row in body)) for i, h in enumerate(cols)]
    line = "  ".join(h.ljust(w) for h, w in zip(cols, widths, strict=False))
    out = [line, "  ".join("-" * w for w in widths)]
    out += ["  ".join(c.ljust(w) for c, w in zip(row, widths, strict=False)) for row in body]
    out += [f"note: {line}" for line in notes(results)]
    out += workload_lines(results)
    out += split_lines(results)
    out += speedup_lines(results)
    out += slo_lines(results)
    out += baseline_lines(results)
    return "\n".join(out)


def markdown(results: Sequence[ClassResult]) -> str:
    cols = headers(results)
    out = ["### specbound", "", "| " + " | ".join(cols) + " |",
           "|" + "|".join("---" for _ in cols) + "|"]
    out += ["| " + " | ".join(row) + " |" for row in rows(results)]
    out += [f"\n- note: {line}" if i == 0 else f"- note: {line}"
            for i, line in enumerate(notes(results))]
    out += [f"\n- {line}" if i == 0 else f"- {line}"
            for i, line in enumerate(workload_lines(results) + split_lines(results)
                                     + speedup_lines(results)
                                     + slo_lines(results)
                                     + baseline_lines(results))]
    for r in results:
        if r.status in ("pass", "skip"):
            continue
        out.append("")
        out.append(f"**{r.label}** {r.status.upper()}")
        out += [f"- {line}" for line in r.verdict.lines]
    return "\n".join(out) + "\n"


def measurement_text(m: Measurement) -> str:
    """One measurement without a budget, as ``specbound measure`` prints it."""
    ttft = m.ttft_ms()
    lines = [
        f"backend {m.backend}  requests {len(m.records)} (failed {len(m.failures)})",
        f"accept length {_num(m.accept_length)} ({m.accept_source})",
        f"decode {_num(m.decode_tok_s, '.1f')} tok/s (server clock "
        f"{_num(m.server_decode_tok_s, '.1f')})",
        f"TTFT median {_num(ttft.median, '.1f')} ms, p90 {_num(ttft.p90, '.1f')} ms",
    ]
    if m.concurrency > 1:
        lines.insert(3, f"concurrency {m.concurrency}: aggregate {_num(m.aggregate_tok_s, '.1f')}"
                        f" tok/s, {_num(m.co_decoding, '.1f')} decoding at once, "
                        f"{_num(m.in_flight, '.1f')} in flight")
        prefill = m.others_prefill_tokens
        lines.insert(4, "other requests' prompt tokens computed during a decode: "
                        + (f"{prefill:.0f} on average" if prefill is not None else
                           "not reported (the server does not say how much of a prompt it "
                           "computed)"))
    lines += [f"note: {note}" for _code, note in m.notes()]
    lines += [f"failed: {r.error}" for r in m.failures]
    return "\n".join(lines)
