"""``specbound compare OLD NEW``: every class and level of two runs side by side, each figure's
change with its interval, and the two-sample test's decision (the same test the gate runs
against ``--specbound-baseline``, at one look over each run's whole sample)."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from pytest_specbound.gate.references.baseline import Key, key_of
from pytest_specbound.gate.verdicts.result import ClassResult
from pytest_specbound.measure.sequential import Side
from pytest_specbound.measure.speedup import Sample, speedup, speedup_decision
from pytest_specbound.measure.stats import Interval
from pytest_specbound.values import DEFAULT_CONFIDENCE, DEFAULT_RESOLUTION

FIGURES = ("accept", "decode tok/s", "efficiency", "TTFT ms")
JSON_KEYS = {"accept": "accept_length", "decode tok/s": "decode_tok_s",
             "efficiency": "efficiency", "TTFT ms": "ttft_ms_median"}


@dataclass(frozen=True)
class Row:
    """One class at one level in both runs (either may be missing)."""

    key: Key
    old: ClassResult | None
    new: ClassResult | None
    decode: Interval | None  # new over old, a ratio
    accept: Interval | None
    decision: str  # regressed | improved | unchanged | undecided | new class | missing

    def to_json(self) -> dict[str, object]:
        def pair(f: str) -> dict[str, object]:
            return {"old": _figure(self.old, f), "new": _figure(self.new, f)}

        return {"budget": self.key[0], "class": self.key[1], "concurrency": self.key[2],
                "hardware": self.key[3], "decision": self.decision,
                "decode_change": _ratio_json(self.decode), "accept_change": _ratio_json(self.accept),
                **{JSON_KEYS[f]: pair(f) for f in FIGURES}}


def _ratio_json(i: Interval | None) -> dict[str, float] | None:
    return None if i is None else {"change": round(i.estimate - 1, 5),
                                   "low": round(i.low - 1, 5), "high": round(i.high - 1, 5)}


def _figure(r: ClassResult | None, name: str) -> float | None:
    if r is None:
        return None
    return {"accept": r.accept_length, "decode tok/s": r.decode_tok_s,
            "efficiency": r.verdict.efficiency, "TTFT ms": r.ttft_ms.median}[name]


def _values(r: ClassResult, accept: bool) -> list[float]:
    timed = r.timed
    if accept:
        return [q.decode_tokens / q.verify_steps for q in timed if q.verify_steps]
    return [q.decode_tokens / q.decode_s for q in timed]


def decide_change(old: ClassResult, new: ClassResult, confidence: float | None = None,
                  resolution: float | None = None
                  ) -> tuple[Interval | None, Interval | None, str]:
    """The decode and accept ratios (new over old) and the decision: ``regressed`` when either
    test fails against the old run, ``improved`` when the decode rate passes the reverse test,
    else ``unchanged`` (both pass) or ``undecided``. The confidence and resolution are the new
    run's own (those its gate decided at) unless given."""
    confidence = confidence or new.confidence_level or DEFAULT_CONFIDENCE
    resolution = resolution or new.resolution or DEFAULT_RESOLUTION
    level = confidence
    alpha = (1 - confidence) / 2
    sides: list[Side] = []
    ratios: list[Interval | None] = []
    for accept in (False, True):
        a, b = _values(old, accept), _values(new, accept)
        if len(a) < 2 or len(b) < 2:
            ratios.append(None)
            continue
        base = Sample(tuple(a), (), 0.0, 0.0)
        ratios.append(speedup(b, base, level))
        sides.append(speedup_decision(b, base, 1.0, alpha, resolution).side)
    if Side.BAD in sides:
        return ratios[0], ratios[1], "regressed"
    decode = ratios[0]
    if decode is not None and decode.low > 1 and decode.estimate - 1 >= resolution:
        return decode, ratios[1], "improved"
    return decode, ratios[1], "unchanged" if sides and all(s is Side.OK for s in sides) \
        else "undecided"


def compare(old: Mapping[Key, ClassResult], new: Sequence[ClassResult],
            confidence: float | None = None, resolution: float | None = None) -> list[Row]:
    rows = []
    seen = set()
    for r in new:
        key = key_of(r)
        seen.add(key)
        before = old.get(key)
        if before is None:
            rows.append(Row(key, None, r, None, None, "new class"))
            continue
        decode, accept, decision = decide_change(before, r, confidence, resolution)
        rows.append(Row(key, before, r, decode, accept, decision))
    rows += [Row(k, o, None, None, None, "missing") for k, o in old.items() if k not in seen]
    return rows


def _num(v: float | None, spec: str) -> str:
    return "-" if v is None or not math.isfinite(v) else format(v, spec)


def _change(i: Interval | None) -> str:
    if i is None:
        return "-"
    return f"{i.estimate - 1:+.1%} [{i.low - 1:+.1%}, {i.high - 1:+.1%}]"


def table_rows(rows: Sequence[Row]) -> tuple[list[str], list[list[str]]]:
    head = ["class", "conc", "hardware", "accept", "change", "decode tok/s", "change",
            "efficiency", "TTFT ms", "decision"]
    body = []
    for row in rows:
        o, n = row.old, row.new
        body.append([
            f"{row.key[0]}::{row.key[1]}", str(row.key[2]), row.key[3],
            f"{_num(_figure(o, 'accept'), '.2f')} -> {_num(_figure(n, 'accept'), '.2f')}",
            _change(row.accept),
            f"{_num(_figure(o, 'decode tok/s'), '.1f')} -> {_num(_figure(n, 'decode tok/s'), '.1f')}",
            _change(row.decode),
            f"{_num(_figure(o, 'efficiency'), '.2f')} -> {_num(_figure(n, 'efficiency'), '.2f')}",
            f"{_num(_figure(o, 'TTFT ms'), '.0f')} -> {_num(_figure(n, 'TTFT ms'), '.0f')}",
            row.decision.upper() if row.decision == "regressed" else row.decision])
    return head, body


def render(rows: Sequence[Row], fmt: str) -> str:
    if fmt == "json":
        return json.dumps({"rows": [r.to_json() for r in rows],
                           "regressed": sum(r.decision == "regressed" for r in rows)}, indent=2)
    head, body = table_rows(rows)
    if fmt == "markdown":
        lines = ["| " + " | ".join(head) + " |", "|" + "|".join("---" for _ in head) + "|"]
        return "\n".join(lines + ["| " + " | ".join(b) + " |" for b in body]) + "\n"
    widths = [max(len(h), *(len(b[i]) for b in body)) if body else len(h)
              for i, h in enumerate(head)]
    lines = ["  ".join(h.ljust(w) for h, w in zip(head, widths, strict=True)),
             "  ".join("-" * w for w in widths)]
    return "\n".join(lines + ["  ".join(c.ljust(w) for c, w in zip(b, widths, strict=True))
                              for b in body])
