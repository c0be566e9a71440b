"""One evaluator per threshold: each reads the measured figures (and the threshold's sequential
test, where there is one) and returns an :class:`Evaluation`; :mod:`pytest_specbound.gate.judge`
composes them into the verdict, and the sequential rule asks them whether the class is decided.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

from pytest_specbound.gate.budget import ClassBudget
from pytest_specbound.gate.verdict import Reason, Verdict
from pytest_specbound.measure.measurement import Measurement, Stop
from pytest_specbound.measure.prefill import level_roofline
from pytest_specbound.measure.proportion import met_slos, percentile, tpot_values
from pytest_specbound.measure.sequential import Decision, Side, Threshold
from pytest_specbound.measure.speedup import (
    Baseline,
    Earlier,
    accept_values,
    change,
    spec_rates,
    speedup,
)
from pytest_specbound.measure.stats import Interval
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
    speedup: Interval | None = None  # over the class without speculation, where measured
    decode_change: Interval | None = None  # against the last accepted run (relative)
    accept_change: Interval | None = None


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


def figures(m: Measurement, roof: Roofline, base: Baseline | None = None,
            level: float = 0.95, earlier: Earlier | None = None) -> Figures | Verdict:
    """The figures the thresholds are judged on, or the error verdict when there are none;
    with ``base`` (the class without speculation) the speedup and its interval at ``level``."""
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
                   m.ttft_ms().median, m.concurrency,
                   speedup(spec_rates(m), base, level) if base is not None else None,
                   change(spec_rates(m), earlier.decode, level) if earlier else None,
                   change(accept_values(m), earlier.accept, level)
                   if earlier and earlier.accept else None)


def _evidence(threshold: Threshold, d: Decision, limit: str) -> str:
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
    return d.side, (_evidence(threshold, d, f"{'>=' if threshold.floor else '<='} {limit:g}"),)


def _band(b: tuple[float, float]) -> str:
    return f"[{b[0]:g}, {b[1]:g}]"


def accept_band(budget: ClassBudget, f: Figures, decisions: Decisions | None) -> Evaluation | None:
    """The drafter's band: both edges, one finding."""
    if budget.accept is None:
        return None
    low, ev_low = side_of(Threshold.ACCEPT_LOW, f.accept, budget.accept[0], decisions)
    high, ev_high = side_of(Threshold.ACCEPT_HIGH, f.accept, budget.accept[1], decisions)
    evidence = ev_low + ev_high
    if Side.BAD in (low, high):
        below = low == Side.BAD or (high != Side.BAD and f.accept < budget.accept[0])
        where = "below" if below else "above"
        return Evaluation(Side.BAD, "drafter", "accept_below_band" if below else "accept_above_band",
                          (f"accept {f.accept:.2f} is {where} its band {_band(budget.accept)}: "
                           "the drafter (or the prompts) changed",), evidence=evidence)
    if Side.UNSURE in (low, high):
        return Evaluation(Side.UNSURE, "drafter", pending=f"accept {f.accept:.2f} vs band "
                          f"{_band(budget.accept)}", evidence=evidence)
    return Evaluation(Side.OK, "drafter", evidence=evidence)


def efficiency_floor(budget: ClassBudget, f: Figures, decisions: Decisions | None,
                     accept_in_band: bool, prefill_unknown: str | None) -> Evaluation | None:
    """The system's floor: ``min_efficiency x`` the roofline at the measured accept length.
    ``prefill_unknown``: the note when a level's floor could not count others' prefill."""
    floor = budget.min_efficiency
    if floor is None:
        return None
    side, evidence = side_of(Threshold.EFFICIENCY, f.efficiency, floor, decisions)
    if side == Side.UNSURE:
        return Evaluation(Side.UNSURE, pending=f"efficiency {f.efficiency:.2f} vs min {floor:.2f}",
                          evidence=evidence)
    if side == Side.OK:
        return Evaluation(Side.OK, evidence=evidence)
    level = f" per user at concurrency {f.concurrency}, batch {f.roof.batch}" \
        if f.concurrency > 1 else ""
    in_band = (f"; accept {f.accept:.2f} is inside {_band(budget.accept)}"
               if budget.accept is not None and accept_in_band else "")
    lines = [f"decode {f.tok_s:.1f} tok/s{level} < floor {floor * f.roof_tok_s:.1f} tok/s "
             f"({floor:.2f} x roofline {f.roof_tok_s:.1f} at accept {f.accept:.2f})",
             f"per round {f.round_ms:.1f} ms vs roofline {f.roof.round_ms:.1f} ms: the system "
             f"slowed down{in_band}"]
    if prefill_unknown:
        lines.append(prefill_unknown)
    return Evaluation(Side.BAD, "system", "efficiency_below_min", tuple(lines), evidence=evidence)


def min_rate(budget: ClassBudget, f: Figures, decisions: Decisions | None) -> Evaluation | None:
    """``min_tok_s``: an absolute per-user decode rate."""
    if budget.min_tok_s is None:
        return None
    side, evidence = side_of(Threshold.DECODE_TOK_S, f.tok_s, budget.min_tok_s, decisions)
    return Evaluation(side, "system", "tok_s_below_min" if side == Side.BAD else None,
                      (f"decode {f.tok_s:.1f} tok/s < min_tok_s {budget.min_tok_s:g}",)
                      if side == Side.BAD else (),
                      f"decode {f.tok_s:.1f} tok/s vs min {budget.min_tok_s:g}"
                      if side == Side.UNSURE else None, evidence)


def max_ttft(budget: ClassBudget, f: Figures, decisions: Decisions | None) -> Evaluation | None:
    """``max_ttft_ms``: the median time to first token, by its own test."""
    if budget.max_ttft_ms is None or f.ttft_ms is None:
        return None
    ttft, limit = f.ttft_ms, budget.max_ttft_ms
    side, evidence = side_of(Threshold.TTFT_MS, ttft, limit, decisions)
    return Evaluation(side, "system", "ttft_above_max" if side == Side.BAD else None,
                      (f"TTFT median {ttft:.0f} ms > max_ttft_ms {limit:g}",)
                      if side == Side.BAD else (),
                      f"TTFT median {ttft:.0f} ms vs max {limit:g}" if side == Side.UNSURE else None,
                      evidence)


def slo_shares(budget: ClassBudget, m: Measurement,
               decisions: Decisions | None) -> list[Evaluation]:
    """``max_tpot_ms`` at its percentile and ``min_goodput``: shares of requests, each by a
    sequential proportion test."""
    out = []
    if budget.max_tpot_ms is not None:
        q = budget.tpot_percentile
        value = percentile(tpot_values(m), q / 100)
        shown = f"TPOT p{q:g} {value:.2f} ms" if value is not None else f"TPOT p{q:g} -"
        share = _share(met_slos(m, None, budget.max_tpot_ms))
        side, evidence = side_of(Threshold.TPOT_MS, value if value is not None else math.inf,
                                 budget.max_tpot_ms, decisions)
        out.append(Evaluation(side, "system", "tpot_above_max" if side == Side.BAD else None,
                              (f"{shown} > max_tpot_ms {budget.max_tpot_ms:g} (only {share:.1%} "
                               f"of requests within it, p{q:g} asks {q / 100:.0%})",)
                              if side == Side.BAD else (),
                              f"{shown} vs max {budget.max_tpot_ms:g}" if side == Side.UNSURE
                              else None, evidence))
    if budget.min_goodput is not None:
        share = _share(met_slos(m, budget.max_ttft_ms, budget.max_tpot_ms))
        side, evidence = _share_side(Threshold.GOODPUT, share, budget.min_goodput, decisions)
        out.append(Evaluation(side, "system", "goodput_below_min" if side == Side.BAD else None,
                              (f"goodput {share:.1%} < min_goodput {budget.min_goodput:g} (the "
                               "share of requests meeting every SLO)",) if side == Side.BAD
                              else (), f"goodput {share:.1%} vs min {budget.min_goodput:g}"
                              if side == Side.UNSURE else None, evidence))
    return out


def _share(met: list[bool]) -> float:
    return sum(met) / len(met) if met else 0.0


def _share_side(threshold: Threshold, share: float, p0: float,
                decisions: Decisions | None) -> tuple[Side, tuple[str, ...]]:
    if decisions is None:
        return (Side.BAD if share < p0 else Side.OK), ()
    return side_of(threshold, share, p0, decisions)


def min_speedup(budget: ClassBudget, f: Figures, decisions: Decisions | None,
                accept_in_band: bool) -> Evaluation | None:
    """``min_speedup``: decode with speculation over without, at this level."""
    if budget.min_speedup is None or f.speedup is None:
        return None
    s, limit = f.speedup, budget.min_speedup
    side, evidence = side_of(Threshold.SPEEDUP, s.estimate, limit, decisions)
    shown = f"{s.estimate:.2f}x [{s.low:.2f}, {s.high:.2f}]"
    if side == Side.UNSURE:
        return Evaluation(Side.UNSURE, "speculation", pending=f"speedup {shown} vs min "
                          f"{limit:g}x", evidence=evidence)
    if side == Side.OK:
        return Evaluation(Side.OK, "speculation", evidence=evidence)
    band = (f"; accept {f.accept:.2f} in its band {_band(budget.accept)}"
            if budget.accept is not None and accept_in_band else f"; accept {f.accept:.2f}")
    return Evaluation(Side.BAD, "speculation", "speedup_below_min",
                      (f"speculation does not pay at c{f.concurrency}: {shown} < min_speedup "
                       f"{limit:g}x{band}",), evidence=evidence)


def _pct(c: Interval) -> str:
    return f"{c.estimate:+.1%} [{c.low:+.1%}, {c.high:+.1%}]"


def against_earlier(f: Figures, decisions: Decisions | None, earlier: Earlier | None,
                    final: bool = False) -> Evaluation | None:
    """No worse than the last accepted run: the decode rate and the accept length, each by a
    two-sample test; a lower accept blames the drafter, a slower round at the same accept the
    system. Still undecided when sampling ended (``final``): a note, not a failure: the two
    runs' requests cannot tell a change of the resolution from none."""
    if earlier is None or f.decode_change is None:
        return None
    d = decisions or {}
    decode = d.get(Threshold.BASELINE_DECODE)
    accept = d.get(Threshold.BASELINE_ACCEPT)
    evidence = tuple(_evidence(t, x, ">= the baseline") for t, x in
                     ((Threshold.BASELINE_DECODE, decode), (Threshold.BASELINE_ACCEPT, accept))
                     if x is not None)
    sides = [x.side for x in (decode, accept) if x is not None]
    if Side.BAD in sides:
        drafter = accept is not None and accept.side == Side.BAD
        return Evaluation(Side.BAD, "drafter" if drafter else "system", "regressed",
                          _regression_lines(f, earlier, drafter), evidence=evidence)
    if (Side.UNSURE in sides or not sides) and final:
        n = earlier.decode.n
        return Evaluation(Side.OK, evidence=evidence, notes=(
            f"note: decode {_pct(f.decode_change)} against {earlier.label}: undecided (its "
            f"{n} requests and these cannot tell a change of the resolution from none; record "
            "baselines with --specbound-until-precise)",))
    if Side.UNSURE in sides or not sides:
        return Evaluation(Side.UNSURE, pending=f"decode {_pct(f.decode_change)} vs "
                          f"{earlier.label}", evidence=evidence)
    return Evaluation(Side.OK, evidence=evidence)


def _regression_lines(f: Figures, earlier: Earlier, drafter: bool) -> tuple[str, ...]:
    lines = [f"decode {_pct(f.decode_change)} against {earlier.label}"] \
        if f.decode_change else []
    old = f"{earlier.accept_length:.2f}" if earlier.accept_length else "-"
    if drafter and f.accept_change is not None:
        lines.append(f"accept {f.accept:.2f} vs {old} in the baseline ({_pct(f.accept_change)}): "
                     "the drafter (or the prompts) changed")
    else:
        was = f"{earlier.round_ms:.2f} ms" if earlier.round_ms else "-"
        lines.append(f"per round {f.round_ms:.2f} ms vs {was} in the baseline at accept "
                     f"{f.accept:.2f} vs {old}: the system slowed down")
    return tuple(lines)


def evaluate(budget: ClassBudget, m: Measurement, f: Figures, decisions: Decisions | None,
             cached_tokens: str | None = None, earlier: Earlier | None = None,
             final: bool = False) -> list[Evaluation]:
    """Every threshold the class sets, in the order the failure text lists them."""
    band = accept_band(budget, f, decisions)
    prefill_unknown = None
    if m.concurrency > 1 and m.others_prefill_tokens is None:
        flag = f" (launch it with {cached_tokens})" if cached_tokens else ""
        prefill_unknown = ("note: other requests' prefill is not in this floor: the server does "
                           f"not say how much of each prompt it computed{flag}")
    found = [band,
             efficiency_floor(budget, f, decisions, band is None or band.side != Side.BAD,
                              prefill_unknown),
             min_rate(budget, f, decisions), max_ttft(budget, f, decisions),
             *slo_shares(budget, m, decisions),
             min_speedup(budget, f, decisions, band is None or band.side != Side.BAD),
             against_earlier(f, decisions, earlier, final)]
    return [e for e in found if e is not None]


def thresholds_decided(budget: ClassBudget, m: Measurement, roof: Roofline,
                       decisions: Decisions, base: Baseline | None = None,
                       earlier: Earlier | None = None) -> bool:
    """The sequential rule's question: has one threshold failed, or have all passed?"""
    f = figures(m, roof, base, earlier=earlier)
    if isinstance(f, Verdict):
        return False
    sides = [e.side for e in evaluate(budget, m, f, decisions, earlier=earlier)]
    return Side.BAD in sides or Side.UNSURE not in sides
