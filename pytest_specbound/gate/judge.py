"""Measurement x class budget x roofline -> a verdict that says which part moved: the
evaluators' findings (:mod:`pytest_specbound.gate.evaluate`) composed, with the measurement's
notes."""

from __future__ import annotations

from typing import cast

from pytest_specbound.gate.budget import ClassBudget
from pytest_specbound.gate.evaluate import Decisions, Evaluation, Figures, evaluate, figures
from pytest_specbound.gate.verdict import Diagnosis, Reason, Status, Verdict, batching_problem
from pytest_specbound.measure.measurement import Measurement
from pytest_specbound.measure.sequential import Side
from pytest_specbound.measure.speedup import Baseline, Earlier
from pytest_specbound.physics.render import one_line
from pytest_specbound.physics.roofline import Roofline


def judge(budget: ClassBudget, m: Measurement, roof: Roofline,
          decisions: Decisions | None = None, final: bool = True,
          batching: str | None = None, resolution: float | None = None,
          cached_tokens: str | None = None, base: Baseline | None = None,
          level: float = 0.95, earlier: Earlier | None = None) -> Verdict:
    """Compare ``m`` with ``budget``.

    ``decisions``: each threshold's sequential test (:mod:`pytest_specbound.gate.rule`); a
    threshold fails or passes as its test decided and is ``inconclusive`` while undecided.
    Without them the point estimates are compared as they are (a fixed-count reading).
    ``final``: the measurement is complete (at a look during sampling, requests still in flight
    are not yet in the overlaps, so batching is judged only at the end); ``batching``: what to
    check when the server did not batch (:func:`~pytest_specbound.gate.verdict.batching_hint`);
    ``resolution``: named in the evidence of an undecided threshold; ``cached_tokens``: the
    server flag that would let a level's floor count other requests' prefill; ``base``: the
    class measured without speculation (the speedup, at ``level``).
    """
    f = figures(m, roof, base, level, earlier)
    if isinstance(f, Verdict):
        return f
    found = evaluate(budget, m, f, decisions, cached_tokens, earlier, final)
    unbatched = batching_problem(m, batching) if final else None
    if unbatched:
        found.append(Evaluation(Side.BAD, "system", "not_batching", (unbatched,)))
    return compose(budget, m, f, found, resolution)


def compose(budget: ClassBudget, m: Measurement, f: Figures, found: list[Evaluation],
            resolution: float | None) -> Verdict:
    """The verdict from the evaluators' findings: status, diagnosis, lines, notes."""
    failed = [e for e in found if e.side == Side.BAD]
    drafter = any(e.party == "drafter" for e in failed)
    system = any(e.party == "system" for e in failed)
    unpaid = any(e.party == "speculation" for e in failed)
    reasons: list[Reason] = [e.reason for e in failed if e.reason]
    lines = [line for e in failed for line in e.failed]
    if drafter and budget.min_efficiency is not None and not system:
        lines.append(f"efficiency {f.efficiency:.2f} >= {budget.min_efficiency:.2f} is still "
                     "fine: the system did not slow down")
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
    for code, note in notes(m):
        reasons.append(code)
        lines.append("note: " + note)
    if status != "pass":
        lines.append("roofline: " + one_line(f.roof))
    diagnosis: Diagnosis = "both" if drafter and system else "drafter" if drafter else \
        "system" if system else "speculation" if unpaid else "none"
    floor = budget.min_efficiency * f.roof_tok_s if budget.min_efficiency is not None else None
    if budget.min_tok_s is not None:
        floor = max(floor or 0.0, budget.min_tok_s)
    return Verdict(status, lines, reasons, diagnosis, f.roof_tok_s, floor, f.efficiency,
                   f.round_ms)


def notes(m: Measurement) -> list[tuple[Reason, str]]:
    """What the verdict notes about how the measurement was taken, with their reason codes."""
    found: list[tuple[Reason, str]] = []
    if m.accept_source == "estimate":
        found.append(("accept_estimated", "accept length is an estimate from stream timing (the "
                                          "server exposes no accept statistics)"))
    return found + [(cast(Reason, code), note) for code, note in m.notes()]
