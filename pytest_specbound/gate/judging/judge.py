"""Measurement x class x roofline -> a verdict that says which part moved: every threshold's
evaluator (:mod:`pytest_specbound.gate.verdicts.thresholds`) and every comparison's
(:mod:`pytest_specbound.gate.references.comparison`) composed, with the measurement's notes and what the
server's settings and GPU telemetry explain. Nothing changes a verdict after :func:`judge`."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import cast

from pytest_specbound.gate.judging.pinned import pin_check
from pytest_specbound.gate.references.comparison import Comparison
from pytest_specbound.gate.schema.class_budget import ClassBudget
from pytest_specbound.gate.verdicts.evaluate import Context, Decisions, Evaluation, Figures, figures
from pytest_specbound.gate.verdicts.thresholds import floor_tok_s, set_in, still_efficient
from pytest_specbound.gate.verdicts.verdict import (
    Diagnosis,
    Reason,
    Status,
    Verdict,
    batching_problem,
    explained,
)
from pytest_specbound.measure.measurement import Measurement
from pytest_specbound.measure.sequential import Side
from pytest_specbound.physics.render import one_line
from pytest_specbound.physics.roofline import Roofline


@dataclass(frozen=True)
class Judging:
    """How a measurement is judged besides its class's own thresholds: the comparisons, and
    what the failure text names (``batching``: what to check when the server did not batch;
    ``resolution``: named in an undecided threshold's evidence; ``cached_tokens``: the server
    flag that lets a level's floor count others' prefill; ``level``: the intervals' confidence;
    ``findings``: the server's settings and GPU telemetry, kind and text; ``beaten``: the note
    when the efficiency beats a CPU ceiling; ``command``: the server measured;
    ``drafter_classes``: the budget's classes that judge the drafter's band, for a pinned
    class's note)."""

    comparisons: Sequence[Comparison] = ()
    batching: str | None = None
    resolution: float | None = None
    cached_tokens: str | None = None
    level: float = 0.95
    findings: Sequence[tuple[str, str]] = ()
    beaten: Callable[[float | None], str | None] | None = None
    command: str | None = None
    drafter_classes: tuple[str, ...] = ()


def judge(cls: ClassBudget, m: Measurement, roof: Roofline, decisions: Decisions | None = None,
          final: bool = True, how: Judging = Judging()) -> Verdict:
    """Compare ``m`` with ``cls``.

    ``decisions``: each threshold's sequential test (:mod:`pytest_specbound.gate.judging.rule`); a
    threshold fails or passes as its test decided and is ``inconclusive`` while undecided.
    Without them the point estimates are compared as they are (a fixed-count reading).
    ``final``: the measurement is complete (at a look during sampling, requests still in flight
    are not yet in the overlaps, so batching is judged only at the end).
    """
    f = figures(m, roof)
    if isinstance(f, Verdict):
        return f
    found = evaluate(cls, m, f, decisions, how, final)
    unbatched = batching_problem(m, how.batching) if final else None
    if unbatched:
        found.append(Evaluation(Side.BAD, "system", "not_batching", (unbatched,)))
    verdict = explained(compose(cls, m, f, found, how.resolution), how.findings,
                        cls.require_no_throttle)
    beaten = how.beaten(verdict.efficiency) if how.beaten and final else None
    return replace(verdict, lines=(*verdict.lines, beaten),
                   reasons=(*verdict.reasons, "above_roofline")) if beaten else verdict


def evaluate(cls: ClassBudget, m: Measurement, f: Figures, decisions: Decisions | None,
             how: Judging = Judging(), final: bool = False) -> list[Evaluation]:
    """Every threshold the class sets and every comparison, in the order the failure text
    lists them (the accept band first: the others name whether accept stayed in it)."""
    prefill_unknown = None
    if m.concurrency > 1 and m.others_prefill_tokens is None:
        flag = f" (launch it with {how.cached_tokens})" if how.cached_tokens else ""
        prefill_unknown = ("note: other requests' prefill is not in this floor: the server does "
                           f"not say how much of each prompt it computed{flag}")
    c = Context(cls.limits, m, f, decisions, cls.tpot_percentile, True, prefill_unknown,
                how.level, final, how.command)
    found: list[Evaluation] = []
    for spec, _value in set_in(cls.limits):
        if spec.evaluate is None:
            continue
        e = spec.evaluate(c)
        if e is not None:
            found.append(e)
            if spec.band and e.side == Side.BAD:
                c = replace(c, accept_in_band=False)
    if cls.pin_accept is not None:
        found.append(pin_check(c, cls.pin_accept, how.drafter_classes))
    found += [e for e in (comparison.evaluate(c) for comparison in how.comparisons)
              if e is not None]
    return found


def decided(cls: ClassBudget, m: Measurement, roof: Roofline, decisions: Decisions,
            comparisons: Sequence[Comparison] = ()) -> bool:
    """The sequential rule's question: has one threshold failed, or have all passed?"""
    f = figures(m, roof)
    if isinstance(f, Verdict):
        return False
    sides = [e.side for e in evaluate(cls, m, f, decisions, Judging(comparisons))]
    return Side.BAD in sides or Side.UNSURE not in sides


def compose(cls: ClassBudget, m: Measurement, f: Figures, found: list[Evaluation],
            resolution: float | None) -> Verdict:
    """The verdict from the evaluators' findings: status, diagnosis, lines, notes."""
    failed = [e for e in found if e.side == Side.BAD]
    drafter = any(e.party == "drafter" for e in failed)
    system = any(e.party == "system" for e in failed)
    unpaid = any(e.party == "speculation" for e in failed)
    reasons: list[Reason] = [e.reason for e in failed if e.reason]
    lines = [line for e in failed for line in e.failed]
    held = still_efficient(cls.limits, f.efficiency) if drafter and not system else None
    if held:
        lines.append(held)
    undecided = [e.pending for e in found if e.side == Side.UNSURE and e.pending]
    status: Status = "fail" if failed else "inconclusive" if undecided else "pass"
    if status == "inconclusive":
        reasons.append("inconclusive")
        lines.append(f"inconclusive after {len(m.records)} requests: " + "; ".join(undecided))
    evidence = [line for e in found for line in e.evidence]
    if status != "pass" and evidence:
        per = f" (resolution {resolution:.0%})" if resolution is not None else ""
        lines.append(f"evidence{per}: " + "; ".join(evidence))
    lines += [line for e in found for line in e.notes]
    reasons += [code for e in found for code in e.codes]
    for code, note in notes(m):
        reasons.append(code)
        lines.append("note: " + note)
    if status != "pass":
        lines.append("roofline: " + one_line(f.roof))
    diagnosis: Diagnosis = "both" if drafter and system else "drafter" if drafter else \
        "system" if system else "speculation" if unpaid else "none"
    return Verdict(status, lines, reasons, diagnosis, f.roof_tok_s,
                   floor_tok_s(cls.limits, f.roof_tok_s), f.efficiency, f.round_ms)


def notes(m: Measurement) -> list[tuple[Reason, str]]:
    """What the verdict notes about how the measurement was taken, with their reason codes."""
    found: list[tuple[Reason, str]] = []
    if m.accept_source == "estimate":
        found.append(("accept_estimated", "accept length is an estimate from stream timing (the "
                                          "server exposes no accept statistics)"))
    return found + [(cast(Reason, code), note) for code, note in m.notes()]
