"""Every threshold a class can set, declared once: its budget key and valid range, the
sequential tests it runs (:class:`~pytest_specbound.measure.sequential.Threshold` values: the
per-request metric each reads and its side), how a failure reads (its evaluator, reason code
and party), whether a request meeting it counts toward goodput, its results-JSON field and its
line in the summary. The budget parser, the stopping rule, the judge, the class result and the
table read :data:`SPECS` when they run; adding a threshold is one :class:`Spec` and its
evaluator, here or in a plugin's module through :func:`declare`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from pytest_specbound.gate.verdicts.evaluate import Context, Evaluation, band_text, side_of
from pytest_specbound.gate.verdicts.verdict import Reason
from pytest_specbound.measure.measurement import Measurement, Ttft
from pytest_specbound.measure.proportion import (
    decide_share,
    decide_tpot,
    percentile,
    request_ttft_s,
    tpot_values,
)
from pytest_specbound.measure.sequential import Decision, Limit, Side, Threshold
from pytest_specbound.serving.records import RequestRecord

Evaluator = Callable[[Context], "Evaluation | None"]

# the keys other modules read by name (the rest they read through the table)
EFFICIENCY = "min_efficiency"
MIN_TOK_S = "min_tok_s"
SPEEDUP = "min_speedup"

class Judged(Protocol):
    """A class as its tests read it (gate.budget.ClassBudget is one)."""

    @property
    def limits(self) -> Any: ...
    @property
    def tpot_percentile(self) -> float: ...


# a test of its own (a share of requests): (class, measurement, value, alpha, resolution, min_n)
ShareTest = Callable[[Judged, Measurement, float, float, float, int], Decision]


class Reported(Protocol):
    """What a summary line reads of a class result (gate.result.ClassResult has it)."""

    @property
    def tpot_ms(self) -> Ttft: ...
    @property
    def goodput(self) -> float | None: ...
    @property
    def tpot_percentile(self) -> float | None: ...


@dataclass(frozen=True)
class Spec:
    """One threshold: ``key`` in a budget's class (and ``[cN]``) table."""

    key: str
    tests: tuple[Threshold, ...]  # its sequential tests (the accept band has two edges)
    evaluate: Evaluator | None  # None: a comparison evaluates it (min_speedup: the twin's)
    low: float | None = 0  # the valid range in a budget
    high: float | None = None
    json_key: str = ""  # its field in the results JSON (default: the key)
    share: ShareTest | None = None  # a share of requests; default: the per-request ratio test
    needs: tuple[str, ...] = ()  # a class that sets it also sets one of these
    needs_slo: bool = False  # ... or one of the thresholds a request can meet (goodput's)
    why: str = ""  # what its range (or its need) means, in the budget's error
    report: Callable[[Any, Reported, Any], str] | None = None  # (value, result, limits)
    band: bool = False  # a [low, high] pair (the accept band)
    met: Callable[[RequestRecord, float], bool] | None = None  # a request within it (goodput)

    @property
    def field(self) -> str:
        return self.json_key or self.key

    def limits(self, value: Any) -> list[Limit]:
        """The one-sided tests at ``value`` (a band's two edges)."""
        if self.band:
            return [Limit(self.tests[0], value[0]), Limit(self.tests[1], value[1])]
        return [Limit(self.tests[0], value)]

    def to_json(self, value: Any) -> object:
        return list(value) if self.band and value is not None else value

    def from_json(self, raw: object) -> Any:
        if self.band:
            if raw is None:
                return None
            if not isinstance(raw, list) or len(raw) != 2:
                raise ValueError(f"{self.field} must be [low, high], got {raw!r}")
            return float(raw[0]), float(raw[1])
        return float(raw) if isinstance(raw, (int, float)) and not isinstance(raw, bool) else None


# -- the evaluators ----------------------------------------------------------------------


def accept_band(c: Context) -> Evaluation:
    """The drafter's band: both edges, one finding."""
    band = c.limits["accept"]
    low, ev_low = side_of(Threshold.ACCEPT_LOW, c.f.accept, band[0], c.decisions)
    high, ev_high = side_of(Threshold.ACCEPT_HIGH, c.f.accept, band[1], c.decisions)
    evidence = ev_low + ev_high
    if Side.BAD in (low, high):
        below = low == Side.BAD or (high != Side.BAD and c.f.accept < band[0])
        where = "below" if below else "above"
        return Evaluation(Side.BAD, "drafter", "accept_below_band" if below else "accept_above_band",
                          (f"accept {c.f.accept:.2f} is {where} its band {band_text(band)}: "
                           "the drafter (or the prompts) changed",), evidence=evidence)
    if Side.UNSURE in (low, high):
        return Evaluation(Side.UNSURE, "drafter", pending=f"accept {c.f.accept:.2f} vs band "
                          f"{band_text(band)}", evidence=evidence)
    return Evaluation(Side.OK, "drafter", evidence=evidence)


def efficiency_floor(c: Context) -> Evaluation:
    """The system's floor: ``min_efficiency x`` the roofline at the measured accept length."""
    f, floor = c.f, c.limits["min_efficiency"]
    side, evidence = side_of(Threshold.EFFICIENCY, f.efficiency, floor, c.decisions)
    if side == Side.UNSURE:
        return Evaluation(Side.UNSURE, pending=f"efficiency {f.efficiency:.2f} vs min {floor:.2f}",
                          evidence=evidence)
    if side == Side.OK:
        return Evaluation(Side.OK, evidence=evidence)
    level = f" per user at concurrency {f.concurrency}, batch {f.roof.batch}" \
        if f.concurrency > 1 else ""
    band = c.limits.get("accept")
    in_band = (f"; accept {f.accept:.2f} is inside {band_text(band)}"
               if band is not None and c.accept_in_band else "")
    lines = [f"decode {f.tok_s:.1f} tok/s{level} < floor {floor * f.roof_tok_s:.1f} tok/s "
             f"({floor:.2f} x roofline {f.roof_tok_s:.1f} at accept {f.accept:.2f})",
             f"per round {f.round_ms:.1f} ms vs roofline {f.roof.round_ms:.1f} ms: the system "
             f"slowed down{in_band}"]
    if c.prefill_unknown:
        lines.append(c.prefill_unknown)
    return Evaluation(Side.BAD, "system", "efficiency_below_min", tuple(lines), evidence=evidence)


def _simple(c: Context, threshold: Threshold, value: float, limit: float, reason: Reason,
            shown: str, bad: str) -> Evaluation:
    """A threshold whose failure is one line: ``shown`` vs the limit, ``bad`` when failed."""
    side, evidence = side_of(threshold, value, limit, c.decisions)
    above = "min" if threshold.floor else "max"
    return Evaluation(side, "system", reason if side == Side.BAD else None,
                      (bad,) if side == Side.BAD else (),
                      f"{shown} vs {above} {limit:g}" if side == Side.UNSURE else None, evidence)


def min_rate(c: Context) -> Evaluation:
    """``min_tok_s``: an absolute per-user decode rate."""
    limit = c.limits["min_tok_s"]
    return _simple(c, Threshold.DECODE_TOK_S, c.f.tok_s, limit, "tok_s_below_min",
                   f"decode {c.f.tok_s:.1f} tok/s",
                   f"decode {c.f.tok_s:.1f} tok/s < min_tok_s {limit:g}")


def max_ttft(c: Context) -> Evaluation | None:
    """``max_ttft_ms``: the median time to first token, by its own test."""
    ttft, limit = c.f.ttft_ms, c.limits["max_ttft_ms"]
    if ttft is None:
        return None
    return _simple(c, Threshold.TTFT_MS, ttft, limit, "ttft_above_max",
                   f"TTFT median {ttft:.0f} ms", f"TTFT median {ttft:.0f} ms > max_ttft_ms {limit:g}")


def _share(met: list[bool]) -> float:
    return sum(met) / len(met) if met else 0.0


def max_tpot(c: Context) -> Evaluation:
    """``max_tpot_ms`` at ``tpot_percentile``: a share of requests within the limit."""
    q, limit = c.tpot_percentile, c.limits["max_tpot_ms"]
    value = percentile(tpot_values(c.m), q / 100)
    shown = f"TPOT p{q:g} {value:.2f} ms" if value is not None else f"TPOT p{q:g} -"
    share = _share([tpot_within(r, limit) for r in c.m.timed])
    side, evidence = side_of(Threshold.TPOT_MS, value if value is not None else math.inf, limit,
                             c.decisions)
    return Evaluation(side, "system", "tpot_above_max" if side == Side.BAD else None,
                      (f"{shown} > max_tpot_ms {limit:g} (only {share:.1%} of requests within "
                       f"it, p{q:g} asks {q / 100:.0%})",) if side == Side.BAD else (),
                      f"{shown} vs max {limit:g}" if side == Side.UNSURE else None, evidence)


def min_goodput(c: Context) -> Evaluation:
    """``min_goodput``: the share of requests meeting every SLO the class sets."""
    p0 = c.limits["min_goodput"]
    share = _share(met(c.limits, c.m))
    side, evidence = side_of(Threshold.GOODPUT, share, p0, c.decisions)
    return Evaluation(side, "system", "goodput_below_min" if side == Side.BAD else None,
                      (f"goodput {share:.1%} < min_goodput {p0:g} (the share of requests meeting "
                       "every SLO)",) if side == Side.BAD else (),
                      f"goodput {share:.1%} vs min {p0:g}" if side == Side.UNSURE else None,
                      evidence)


def met(limits: Any, m: Measurement) -> list[bool]:
    """Per timed request: whether it met every SLO the class sets (each threshold with a
    ``met``; every request meets none)."""
    slos = [(s.met, v) for s, v in set_in(limits) if s.met is not None]
    return [all(ok(r, v) for ok, v in slos) for r in m.timed]


def sets_slo(limits: Any) -> bool:
    """Whether the class sets a threshold a request can meet (its goodput is then reported)."""
    return any(s.met is not None for s, _ in set_in(limits))


def ttft_within(r: RequestRecord, limit: float) -> bool:
    """TTFT within ``limit`` ms: the client's, or the server's for a request timed on its clock
    (:func:`~pytest_specbound.measure.proportion.request_ttft_s`)."""
    return request_ttft_s(r) * 1e3 <= limit


def tpot_within(r: RequestRecord, limit: float) -> bool:
    return not r.decode_tokens or r.decode_s * 1e3 / r.decode_tokens <= limit


# -- the share tests and the summary lines --------------------------------------------------


def _tpot_test(cls: Judged, m: Measurement, value: float, alpha: float, resolution: float,
               min_n: int) -> Decision:
    return decide_tpot(tpot_values(m), value, cls.tpot_percentile / 100, alpha, resolution,
                       min_n=min_n)


def _goodput_test(cls: Judged, m: Measurement, value: float, alpha: float, resolution: float,
                  min_n: int) -> Decision:
    return decide_share(met(cls.limits, m), value, alpha, resolution, min_n=min_n)


def _num(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def _tpot_figures(r: Reported) -> str:
    return (f"TPOT median {_num(r.tpot_ms.median)} ms, p90 {_num(r.tpot_ms.p90)}, "
            f"p99 {_num(r.tpot_ms.p99)}")


def _tpot_line(value: float, r: Reported, limits: Any) -> str:
    return _tpot_figures(r) + f" (p{r.tpot_percentile or 99:g} <= {value:g})"


def _goodput_line(value: float, r: Reported, limits: Any) -> str:
    figures = "" if limits.get("max_tpot_ms") is not None else _tpot_figures(r) + "; "
    shown = f"goodput {r.goodput:.1%} (>= {value:.0%})" if r.goodput is not None else "goodput -"
    return figures + shown


SPECS: list[Spec] = [
    Spec("accept", (Threshold.ACCEPT_LOW, Threshold.ACCEPT_HIGH), accept_band, low=1.0,
         json_key="accept_band", band=True, why="accept length counts the bonus token"),
    Spec(EFFICIENCY, (Threshold.EFFICIENCY,), efficiency_floor, high=1),
    Spec(MIN_TOK_S, (Threshold.DECODE_TOK_S,), min_rate),
    Spec("max_ttft_ms", (Threshold.TTFT_MS,), max_ttft, met=ttft_within),
    Spec("max_tpot_ms", (Threshold.TPOT_MS,), max_tpot, share=_tpot_test, report=_tpot_line,
         met=tpot_within),
    Spec("min_goodput", (Threshold.GOODPUT,), min_goodput, high=1, share=_goodput_test,
         needs_slo=True, report=_goodput_line,
         why="the share of requests meeting every SLO needs an SLO"),
    Spec(SPEEDUP, (Threshold.SPEEDUP,), None),  # the twin comparison's (against_twin.py)
]  # the table, in the failure text's order; :func:`declare` adds to it


def declare(spec: Spec) -> Spec:
    """Add a threshold to the table (a plugin's, or a conftest's at import): its key becomes a
    budget and marker key, its tests run, its failure is judged and printed. A key or test id
    already declared is a ValueError."""
    again = [i for i, s in enumerate(SPECS) if s.key == spec.key and _origin(s) is not None
             and _origin(s) == _origin(spec)]
    if again:  # the same module imported anew (pytester's in-process runs): the new one
        SPECS[again[0]] = spec
        return spec
    taken = [s.key for s in SPECS if s.key == spec.key or s.field == spec.field] + \
        [t.value for t in _test_ids() if t.value in {u.value for u in spec.tests}]
    if taken:
        raise ValueError(f"threshold {spec.key!r}: {taken[0]!r} is already declared")
    SPECS.append(spec)
    return spec


def _test_ids() -> list[Threshold]:
    """Every test id in use: the table's and the comparisons' (the baseline's two)."""
    builtin = [v for v in vars(Threshold).values() if isinstance(v, Threshold)]
    return [*(t for s in SPECS for t in s.tests), *builtin]


def _origin(spec: Spec) -> tuple[str, str] | None:
    """Where a spec's evaluator was written (module and name), None for a comparison's."""
    fn = spec.evaluate
    return (fn.__module__, fn.__qualname__) if fn is not None else None


def withdraw(key: str) -> None:
    """Remove a declared threshold (a test's cleanup)."""
    SPECS[:] = [s for s in SPECS if s.key != key]


def by_key() -> dict[str, Spec]:
    return {s.key: s for s in SPECS}


def keys() -> tuple[str, ...]:
    """Every threshold's budget key."""
    return tuple(s.key for s in SPECS)


def by_test() -> dict[Threshold, Spec]:
    return {t: s for s in SPECS for t in s.tests}


def needed(spec: Spec) -> tuple[str, ...]:
    """The keys of which a class that sets ``spec`` must set one (none: no need)."""
    slos = tuple(s.key for s in SPECS if s.met is not None) if spec.needs_slo else ()
    return spec.needs + slos


def set_in(limits: Any) -> list[tuple[Spec, Any]]:
    """The specs ``limits`` sets, in declaration order (the failure text's order)."""
    return [(s, limits[s.key]) for s in SPECS if limits.get(s.key) is not None]


def own_limits(limits: Any) -> list[Limit]:
    """Every one-sided test of the thresholds the class evaluates itself."""
    return [t for s, v in set_in(limits) if s.evaluate is not None for t in s.limits(v)]


def floor_tok_s(limits: Any, roofline_tok_s: float) -> float | None:
    """The decode rate a class must reach: its efficiency floor times the roofline, and its
    absolute floor, whichever is higher (None: it sets neither)."""
    share, least = limits.get(EFFICIENCY), limits.get(MIN_TOK_S)
    floor = share * roofline_tok_s if share is not None else None
    return max(floor or 0.0, least) if least is not None else floor


def still_efficient(limits: Any, efficiency: float) -> str | None:
    """Where the drafter failed and the system did not: the efficiency floor that still holds."""
    floor = limits.get(EFFICIENCY)
    if floor is None:
        return None
    return (f"efficiency {efficiency:.2f} >= {floor:.2f} is still fine: the system did not "
            "slow down")


def at_percentile(limits: Any) -> bool:
    """Whether a threshold the class sets is judged at its ``tpot_percentile``."""
    return any(s.share is _tpot_test for s, _ in set_in(limits))


def report_lines(limits: Any, r: Reported) -> Sequence[str]:
    return [s.report(v, r, limits) for s, v in set_in(limits) if s.report is not None]
