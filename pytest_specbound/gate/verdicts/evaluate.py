"""What every evaluator shares: the measured figures, the :class:`Context` an evaluator reads
and the :class:`Evaluation` it returns, and a threshold's side as its sequential test decided.
The evaluators are the thresholds' (:mod:`pytest_specbound.gate.verdicts.thresholds`) and the
comparisons' (:mod:`pytest_specbound.gate.references.comparison`); :mod:`pytest_specbound.gate.judging.judge`
composes their findings into the verdict."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pytest_specbound.gate.verdicts.verdict import Reason, Verdict
from pytest_specbound.measure.measurement import Measurement, Stop
from pytest_specbound.measure.prefill import level_roofline
from pytest_specbound.measure.sequential import Decision, Side, Threshold
from pytest_specbound.physics.roofline import Roofline

Decisions = Mapping[Threshold, Decision]
Party = str  # "drafter", "system" or "speculation": who moved when the threshold fails


@dataclass(frozen=True)
class Figures:
    """What every evaluator reads: the measured rates and the roofline at the measured accept."""

    accept: float
    tok_s: float
    roof: Roofline  # at the level: others' prefill in the rounds included
    roof_tok_s: float
    efficiency: float
    round_ms: float
    ttft_ms: float | None
    concurrency: int


@dataclass(frozen=True)
class Evaluation:
    """One threshold's finding: ``side`` ok / bad / unsure, the failure lines when bad, what is
    pending when unsure, the test's evidence, and which party a failure blames."""

    side: Side
    party: Party = "system"
    reason: Reason | None = None
    failed: tuple[str, ...] = ()
    pending: str | None = None
    evidence: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()  # said in the verdict whatever its status
    codes: tuple[Reason, ...] = ()  # the notes' reason codes


Limits = Mapping[str, Any]  # budget key -> value: a number, or the accept band's (low, high)


@dataclass(frozen=True)
class Context:
    """What an evaluator reads: the class's limits, the measurement, its figures, each test's
    decision (None: a fixed-count reading, point values against the limits) and what the
    findings before it settled."""

    limits: Limits
    m: Measurement
    f: Figures
    decisions: Decisions | None
    tpot_percentile: float = 99.0
    accept_in_band: bool = True  # the accept band did not fail (or is not set)
    prefill_unknown: str | None = None  # a level's floor could not count others' prefill
    level: float = 0.95  # the confidence level of the intervals shown
    final: bool = True  # sampling has ended
    command: str | None = None  # the server measured, where known


def figures(m: Measurement, roof: Roofline) -> Figures | Verdict:
    """The figures the thresholds are judged on, or the error verdict when there are none."""
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
    if accept is None and roof.spec.method == "none":
        accept = 1.0
    if accept is None:
        restart = m.restart_note()
        if restart:
            return Verdict("error", ["no accept length: " + restart], ("no_accept", "server_restarted"))
        return Verdict("error", ["the server reported no accept statistics and the stream gave "
                                 "no estimate"], ("no_accept",))
    level_roof = level_roofline(m, roof)  # others' prefill in the rounds, at a closed-loop level
    roof_tok_s = level_roof.tok_s(min(accept, float(roof.max_accept)))
    return Figures(accept, tok_s, level_roof, roof_tok_s, tok_s / roof_tok_s, accept / tok_s * 1e3,
                   m.ttft_ms().median, m.concurrency)


def evidence_line(threshold: Threshold, d: Decision, limit: str) -> str:
    """One threshold's test as the failure text shows it: estimate, interval, requests, and
    for an undecided one how many more requests it expects to need."""
    est = f"{d.estimate:.3g}" if d.estimate is not None else "-"
    interval = (f" [{d.low:.3g}, {d.high:.3g}]" if d.low is not None and d.high is not None
                and d.low != d.high else "")
    where = f"{threshold.label} {limit}: {est}{interval} over {d.n} requests"
    if d.side == Side.OK:
        return f"{where}: passes"
    if d.side == Side.BAD:
        return f"{where}: fails"
    if d.more is None:
        return f"{where}: undecided (the truth is within the resolution of the threshold)"
    return f"{where}: undecided, about {d.more} more requests would decide it"


def side_of(threshold: Threshold, value: float, limit: float,
            decisions: Decisions | None) -> tuple[Side, tuple[str, ...]]:
    """The threshold's side: as its sequential test decided (with its evidence), else the point
    value against the limit (a fixed-count reading); no test yet is ``unsure``."""
    if decisions is None:
        bad = value < limit if threshold.floor else value > limit
        return (Side.BAD if bad else Side.OK), ()
    d = decisions.get(threshold)
    if d is None:
        return Side.UNSURE, ()
    return d.side, (evidence_line(threshold, d, f"{'>=' if threshold.floor else '<='} {limit:g}"),)


def band_text(b: tuple[float, float]) -> str:
    return f"[{b[0]:g}, {b[1]:g}]"
