"""Measurement x class budget x roofline -> a verdict that says which part moved."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Literal, get_args

from pytest_specbound.gate.budget import ClassBudget
from pytest_specbound.measure.measurement import Measurement, Stop
from pytest_specbound.measure.prefill import level_roofline
from pytest_specbound.measure.sequential import Decision
from pytest_specbound.physics.render import one_line
from pytest_specbound.physics.roofline import Roofline

Status = Literal["pass", "fail", "error", "skip", "inconclusive", "running"]
STATUSES: tuple[Status, ...] = get_args(Status)  # "running": a result still being measured
Diagnosis = Literal["drafter", "system", "both", "none"]
Reason = Literal[
    "request_failed", "untimed", "no_data", "no_accept", "setup", "interrupted",
    "accept_below_band", "accept_above_band", "efficiency_below_min", "tok_s_below_min",
    "ttft_above_max", "not_batching", "throttled", "inconclusive",
    "accept_estimated", "clock_disagreement", "server_clock_used", "untimed_retried",
    "stream_chunked",
    "server_restarted",
]
REASONS: tuple[Reason, ...] = get_args(Reason)


@dataclass(frozen=True)
class Verdict:
    status: Status
    lines: Sequence[str] = ()  # the failure text, one finding per line
    reasons: Sequence[Reason] = ()  # machine-readable codes
    diagnosis: Diagnosis = "none"
    roofline_tok_s: float | None = None
    floor_tok_s: float | None = None
    efficiency: float | None = None
    round_ms: float | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "lines", tuple(self.lines))
        object.__setattr__(self, "reasons", tuple(self.reasons))

    @property
    def text(self) -> str:
        return "\n".join(self.lines)


def _band(b: tuple[float, float]) -> str:
    return f"[{b[0]:g}, {b[1]:g}]"


LABELS = {"accept_low": "accept", "accept_high": "accept", "efficiency": "efficiency",
          "decode_tok_s": "decode tok/s", "ttft_ms": "TTFT ms"}


def _evidence(key: str, d: Decision, threshold: str) -> str:
    """One threshold's test as the failure text shows it: estimate, interval, requests, and
    for an undecided one how many more requests it expects to need."""
    est = f"{d.estimate:.3g}" if d.estimate is not None else "-"
    interval = (f" [{d.low:.3g}, {d.high:.3g}]" if d.low is not None and d.high is not None
                and d.low != d.high else "")
    where = f"{LABELS.get(key, key)} {threshold}: {est}{interval} over {d.n} requests"
    if d.side == "ok":
        return f"{where}: passes"
    if d.side == "bad":
        return f"{where}: fails"
    if d.more is None:
        return f"{where}: undecided (the truth is within the resolution of the threshold)"
    return f"{where}: undecided, about {d.more} more requests would decide it"


def batching_hint(backend: str, setting: str | None, level: int,
                  slots: int | None = None, source: str = "") -> str | None:
    """What usually stops a server from batching ``level`` sequences, for the failure text."""
    if not setting:
        return None
    serves = f" (it serves {slots} at once: {source})" if slots is not None else ""
    return f"{backend} caps concurrent sequences with {setting}: set it to at least {level}{serves}"


def batching_problem(m: Measurement, hint: str | None = None) -> str | None:
    """A sentence when a level above 1 decoded fewer sequences at once than half-way from 1 to
    its level (a server that queues requests instead of batching them), else None."""
    n, co = m.concurrency, m.co_decoding
    if n <= 1 or co is None or co >= 1 + (n - 1) / 2:
        return None
    agg, per_user = m.aggregate_tok_s, m.decode_tok_s
    rates = (f" (aggregate {agg:.1f} tok/s, {per_user:.1f} per user)"
             if agg is not None and per_user is not None else "")
    where = f"; {hint}" if hint else ""
    return (f"the server did not batch: {n} requests in flight, {co:.1f} decoded at once on "
            f"average{rates}{where}")


def judge(budget: ClassBudget, m: Measurement, roof: Roofline,
          decisions: Mapping[str, Decision] | None = None, final: bool = True,
          batching: str | None = None, resolution: float | None = None,
          cached_tokens: str | None = None) -> Verdict:
    """Compare ``m`` with ``budget``.

    ``decisions``: each threshold's sequential test (:mod:`pytest_specbound.gate.rule`), keyed
    accept_low, accept_high, efficiency, decode_tok_s, ttft_ms; a threshold fails or passes as
    its test decided and is ``inconclusive`` while undecided. Without them the point estimates
    are compared as they are (a fixed-count reading). ``final``: the measurement is complete (at
    a look during sampling, requests still in flight are not yet in the overlaps, so batching is
    judged only at the end); ``batching``: what to check when the server did not batch
    (:func:`batching_hint`); ``resolution``: named in the evidence of an undecided threshold;
    ``cached_tokens``: the server flag that would let a level's floor count other requests'
    prefill, named when a level above 1 fails on efficiency without it.
    """
    if m.failures:
        first = m.failures[0].error
        return Verdict("error", [f"{len(m.failures)} of {len(m.records)} requests failed: {first}"],
                       ("request_failed",))
    if m.stop is Stop.UNTIMED:
        return Verdict("error", [f"{len(m.untimed)} of {len(m.records) + len(m.untimed)} requests "
                                 f"could not be timed (more than the allowance of {m.max_untimed}):"
                                 f" {m.untimed[0].untimed}"], ("untimed",))
    accept, tok_s = m.accept_length, m.decode_tok_s
    if tok_s is None:
        return Verdict("error", ["no decode time measured (no request produced 2+ tokens)"],
                       ("no_data",))
    if accept is None:
        accept = 1.0 if roof.spec.method == "none" else None
    if accept is None:
        restart = m.restart_note()
        if restart:
            return Verdict("error", ["no accept length: " + restart], ("no_accept", "server_restarted"))
        return Verdict("error", ["the server reported no accept statistics and the stream gave "
                                 "no estimate"], ("no_accept",))
    accept_capped = min(accept, float(roof.max_accept))
    roof = level_roofline(m, roof)  # others' prefill in the rounds, at a closed-loop level
    roof_tok_s = roof.tok_s(accept_capped)
    efficiency = tok_s / roof_tok_s
    round_ms = accept / tok_s * 1e3
    floor = budget.min_efficiency * roof_tok_s if budget.min_efficiency is not None else None
    if budget.min_tok_s is not None:
        floor = max(floor or 0.0, budget.min_tok_s)
    reasons: list[Reason] = []
    lines: list[str] = []
    undecided: list[str] = []
    evidence: list[str] = []

    def side(key: str, value: float, low: float | None, high: float | None) -> str:
        """'ok', 'bad' or 'unsure' for the threshold ``key`` (its test, else ``value``)."""
        if decisions is not None:
            d = decisions.get(key)
            if d is not None:
                limit = f">= {low:g}" if low is not None else f"<= {high:g}"
                evidence.append(_evidence(key, d, limit))
                return d.side
            return "unsure"
        if (low is not None and value < low) or (high is not None and value > high):
            return "bad"
        return "ok"

    drafter = system = False
    if budget.accept is not None:
        sides = (side("accept_low", accept, budget.accept[0], None),
                 side("accept_high", accept, None, budget.accept[1]))
        s = "bad" if "bad" in sides else "unsure" if "unsure" in sides else "ok"
        where = "below" if sides[0] == "bad" or (sides[1] != "bad" and accept < budget.accept[0]) \
            else "above"
        if s == "bad":
            drafter = True
            reasons.append("accept_below_band" if where == "below" else "accept_above_band")
            lines.append(f"accept {accept:.2f} is {where} its band {_band(budget.accept)}: "
                           "the drafter (or the prompts) changed")
        elif s == "unsure":
            undecided.append(f"accept {accept:.2f} vs band {_band(budget.accept)}")
    if budget.min_efficiency is not None:
        s = side("efficiency", efficiency, budget.min_efficiency, None)
        if s == "bad":
            system = True
            reasons.append("efficiency_below_min")
            level = (f" per user at concurrency {m.concurrency}, batch {roof.batch}"
                     if m.concurrency > 1 else "")
            lines.append(
                f"decode {tok_s:.1f} tok/s{level} < floor {budget.min_efficiency * roof_tok_s:.1f} "
                f"tok/s ({budget.min_efficiency:.2f} x roofline {roof_tok_s:.1f} at accept "
                f"{accept:.2f})")
            in_band = (f"; accept {accept:.2f} is inside {_band(budget.accept)}"
                       if budget.accept is not None and not drafter else "")
            lines.append(f"per round {round_ms:.1f} ms vs roofline {roof.round_ms:.1f} ms: "
                           f"the system slowed down{in_band}")
            if m.concurrency > 1 and m.others_prefill_tokens is None:
                flag = f" (launch it with {cached_tokens})" if cached_tokens else ""
                lines.append("note: other requests' prefill is not in this floor: the server "
                             f"does not say how much of each prompt it computed{flag}")
        elif s == "unsure":
            undecided.append(f"efficiency {efficiency:.2f} vs min {budget.min_efficiency:.2f}")
    def system_limit(key: str, value: float, low: float | None, high: float | None,
                     reason: Reason, failed: str, pending: str) -> bool:
        """A plain system threshold: its failure line, or what is still undecided."""
        s = side(key, value, low, high)
        if s == "bad":
            reasons.append(reason)
            lines.append(failed)
        elif s == "unsure":
            undecided.append(pending)
        return s == "bad"

    if budget.min_tok_s is not None:
        system |= system_limit(
            "decode_tok_s", tok_s, budget.min_tok_s, None, "tok_s_below_min",
            f"decode {tok_s:.1f} tok/s < min_tok_s {budget.min_tok_s:g}",
            f"decode {tok_s:.1f} tok/s vs min {budget.min_tok_s:g}")
    ttft = m.ttft_ms().median
    if budget.max_ttft_ms is not None and ttft is not None:
        system |= system_limit(
            "ttft_ms", ttft, None, budget.max_ttft_ms, "ttft_above_max",
            f"TTFT median {ttft:.0f} ms > max_ttft_ms {budget.max_ttft_ms:g}",
            f"TTFT median {ttft:.0f} ms vs max {budget.max_ttft_ms:g}")
    unbatched = batching_problem(m, batching) if final else None
    if unbatched:
        system = True
        reasons.append("not_batching")
        lines.append(unbatched)
    if drafter and budget.min_efficiency is not None and not system:
        lines.append(f"efficiency {efficiency:.2f} >= {budget.min_efficiency:.2f} is still fine: "
                       "the system did not slow down")
    diagnosis: Diagnosis = "both" if drafter and system else "drafter" if drafter else \
        "system" if system else "none"
    status: Status = "pass"
    if drafter or system:
        status = "fail"
    elif undecided:
        status = "inconclusive"
        reasons.append("inconclusive")
        lines.append(f"inconclusive after {len(m.records)} requests: " + "; ".join(undecided))
    if status != "pass" and evidence:
        per = f" (resolution {resolution:.0%})" if resolution is not None else ""
        lines.append(f"evidence{per}: " + "; ".join(evidence))
    if m.accept_source == "estimate":
        reasons.append("accept_estimated")
        lines.append("note: accept length is an estimate from stream timing (the server "
                     "exposes no accept statistics)")
    notes: tuple[tuple[Reason, str | None], ...] = (
        ("clock_disagreement", m.clock_note()), ("server_clock_used", m.server_clock_note()),
        ("untimed_retried", m.untimed_note()), ("stream_chunked", m.chunked_note()),
        ("server_restarted", m.restart_note()))
    for code, note in notes:
        if note:
            reasons.append(code)
            lines.append("note: " + note)
    if status != "pass":
        lines.append("roofline: " + one_line(roof))
    return Verdict(status, lines, reasons, diagnosis, roof_tok_s, floor, efficiency, round_ms)


def explained(verdict: Verdict, found: Sequence[tuple[str, str]],
              require_no_throttle: bool = False) -> Verdict:
    """``verdict`` with what GPU telemetry found: each finding under a failure the system caused
    (``why: ...``), and a throttled GPU as a failure of its own where the budget requires none."""
    throttled = [text for kind, text in found if kind == "throttle"]
    lines, reasons = list(verdict.lines), list(verdict.reasons)
    status, diagnosis = verdict.status, verdict.diagnosis
    if require_no_throttle and throttled and status in ("pass", "fail", "inconclusive"):
        status = "fail"
        reasons.append("throttled")
        lines.insert(0, f"the GPU throttled (require_no_throttle): {throttled[0]}")
        diagnosis = "both" if diagnosis in ("drafter", "both") else "system"
    if diagnosis in ("system", "both"):
        lines += [f"why: {text}" for _, text in found]
    if (status, lines, reasons) == (verdict.status, list(verdict.lines), list(verdict.reasons)):
        return verdict
    return replace(verdict, status=status, lines=tuple(lines), reasons=tuple(reasons),
                   diagnosis=diagnosis)
