"""The summary table (terminal and markdown) of class results."""

from __future__ import annotations

from collections.abc import Sequence

from pytest_specbound.gate.result import ClassResult, basename
from pytest_specbound.measure.measurement import Measurement

HEADERS = ("class", "hardware", "conc", "accept [band]", "tok/s", "floor", "roofline",
           "efficiency", "verdict")
AGGREGATE = "aggregate"  # a column only where some result ran above concurrency 1


def headers(results: Sequence[ClassResult]) -> tuple[str, ...]:
    """The table's columns: tok/s is per user; the aggregate appears with concurrency > 1."""
    if any(r.concurrency > 1 for r in results):
        i = HEADERS.index("tok/s") + 1
        return (*HEADERS[:i], AGGREGATE, *HEADERS[i:])
    return HEADERS


def _num(value: float | None, spec: str = ".2f") -> str:
    return "-" if value is None else format(value, spec)


def rows(results: Sequence[ClassResult]) -> list[tuple[str, ...]]:
    with_aggregate = AGGREGATE in headers(results)
    out: list[tuple[str, ...]] = []
    for r in results:
        accept = _num(r.accept_length, ".2f")
        if r.accept_band:
            accept += f" [{r.accept_band[0]:g}, {r.accept_band[1]:g}]"
        if r.accept_source == "estimate":
            accept += " (est.)"
        if r.accept_source == "window":
            accept += " (window)"
        v = r.verdict
        aggregate = (_num(r.aggregate_tok_s, ".1f"),) if with_aggregate else ()
        out.append((
            f"{basename(r.budget)}::{r.class_name}", r.hardware, str(r.concurrency), accept,
            _num(r.decode_tok_s, ".1f"), *aggregate, _num(v.floor_tok_s, ".1f"),
            _num(v.roofline_tok_s, ".1f"), _num(v.efficiency, ".2f"), v.status.upper(),
        ))
    return out


def notes(results: Sequence[ClassResult]) -> list[str]:
    """One line per timing note (clocks that disagree, server-timed or retried requests)."""
    return [f"{r.label}: {note}" for r in results
            for note in (r.clock_note, r.server_clock_note, r.untimed_note) if note]


def terminal(results: Sequence[ClassResult]) -> str:
    body = rows(results)
    cols = headers(results)
    widths = [max(len(h), *(len(row[i]) for row in body)) for i, h in enumerate(cols)]
    line = "  ".join(h.ljust(w) for h, w in zip(cols, widths, strict=False))
    out = [line, "  ".join("-" * w for w in widths)]
    out += ["  ".join(c.ljust(w) for c, w in zip(row, widths, strict=False)) for row in body]
    out += [f"note: {line}" for line in notes(results)]
    return "\n".join(out)


def markdown(results: Sequence[ClassResult]) -> str:
    cols = headers(results)
    out = ["### specbound", "", "| " + " | ".join(cols) + " |",
           "|" + "|".join("---" for _ in cols) + "|"]
    out += ["| " + " | ".join(row) + " |" for row in rows(results)]
    out += [f"\n- note: {line}" if i == 0 else f"- note: {line}"
            for i, line in enumerate(notes(results))]
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
