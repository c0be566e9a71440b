"""The verdict: its status, reasons and diagnosis; what a server that did not batch and GPU
telemetry add to it. Built by :mod:`pytest_specbound.gate.judging.judge`."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Literal, get_args

from pytest_specbound.measure.measurement import Measurement

Status = Literal["pass", "fail", "error", "skip", "inconclusive", "running"]
STATUSES: tuple[Status, ...] = get_args(Status)  # "running": a result still being measured
Diagnosis = Literal["drafter", "system", "both", "speculation", "none"]
Reason = Literal[
    "request_failed", "untimed", "no_data", "no_accept", "setup", "interrupted",
    "accept_below_band", "accept_above_band", "efficiency_below_min", "tok_s_below_min",
    "ttft_above_max", "not_batching", "throttled", "inconclusive",
    "accept_estimated", "clock_disagreement", "server_clock_used", "untimed_retried",
    "stream_chunked",
    "server_restarted", "speedup_below_min", "regressed", "improved", "baseline_differs",
    "baseline_missing", "tpot_above_max", "goodput_below_min", "drift", "above_roofline",
    "pinned", "not_pinned",
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
