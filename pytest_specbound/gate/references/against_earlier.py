"""Against the last accepted run: one class at one level of that run (:class:`EarlierRun`), the
two-sample tests on the decode rate and the accept length, the finding (a lower accept blames
the drafter, a slower round at the same accept the system), what differs between the two runs,
and the comparison's JSON (``baseline``). Reading the files:
:mod:`pytest_specbound.gate.references.baseline`."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Protocol

from pytest_specbound.gate.references.identity import machine_text
from pytest_specbound.gate.verdicts.evaluate import Context, Evaluation, Figures, Limits, evidence_line
from pytest_specbound.gate.verdicts.result import ClassResult
from pytest_specbound.gate.verdicts.verdict import Reason
from pytest_specbound.measure.measurement import Measurement
from pytest_specbound.measure.sequential import Decision, Limit, Side, Threshold
from pytest_specbound.measure.speedup import (
    Sample,
    accept_values,
    change,
    spec_rates,
    speedup_decision,
)
from pytest_specbound.measure.stats import Interval
from pytest_specbound.physics.roofline import Roofline
from pytest_specbound.serving.records import ServerInfo

MISSING = ("note: no baseline for this class and level (a new class, or one the baseline run "
           "did not finish): not compared")


@dataclass(frozen=True)
class EarlierRun:
    """One class at one level of the baseline run, with that run's identity."""

    result: ClassResult
    identity: Mapping[str, object] = field(default_factory=dict)
    path: str = ""

    @property
    def decode(self) -> Sample:
        return Sample(tuple(q.decode_tokens / q.decode_s for q in self.result.timed))

    @property
    def accept(self) -> Sample | None:
        values = [q.decode_tokens / q.verify_steps for q in self.result.timed if q.verify_steps]
        return Sample(tuple(values)) if len(values) >= 2 else None

    @property
    def label(self) -> str:
        """``baseline run 2026-12-04 (commit abc1234)``."""
        created = str(self.identity.get("created") or "")[:10] or "of unknown date"
        sha = self.identity.get("commit")
        return f"baseline run {created}" + (f" (commit {str(sha)[:7]})" if sha else "")

    def to_json(self) -> dict[str, object]:
        return {"path": self.path, "created": self.identity.get("created"),
                "commit": self.identity.get("commit"), "machine": machine_text(self.identity),
                "server": self.result.server.version, "command": self.result.command,
                "budget_sha256": self.result.budget_sha256, "samples": self.result.samples}


class Run(Protocol):
    """What the differences between two runs read of each (a ClassResult is one)."""

    @property
    def server(self) -> ServerInfo: ...
    @property
    def backend(self) -> str | None: ...
    @property
    def budget_sha256(self) -> str | None: ...
    @property
    def sampling(self) -> Mapping[str, object]: ...
    @property
    def command(self) -> str | None: ...


@dataclass(frozen=True)
class RunFacts:
    """This run's side of :func:`differences` while it is judged."""

    server: ServerInfo
    backend: str | None
    budget_sha256: str | None
    sampling: Mapping[str, object]
    command: str | None


def differences(ref: EarlierRun, identity: Mapping[str, object], current: Run) -> list[str]:
    """What differs between the baseline's run and this one, as verdict notes."""
    out = []
    then, now = machine_text(ref.identity), machine_text(identity)
    if ref.identity and then != now:
        out.append(f"baseline ran on {then}; this run on {now}")
    old, new = ref.result.server.version, current.server.version
    if ref.result.backend and current.backend and ref.result.backend != current.backend:
        out.append(f"baseline server {ref.result.backend}; this run {current.backend}")
    elif old and new and old != new:
        out.append(f"baseline server version {old}; this run {new}")
    if ref.result.budget_sha256 and current.budget_sha256 and \
            ref.result.budget_sha256 != current.budget_sha256:
        out.append("the budget file changed since the baseline")
    if ref.result.sampling and current.sampling and ref.result.sampling != current.sampling:
        out.append(f"baseline sampled with {_sampled(ref.result.sampling)}; this run "
                   f"{_sampled(current.sampling)}")
    if ref.result.command and current.command and ref.result.command != current.command:
        out.append("the server's command line changed since the baseline")
    return out


def _sampled(fields: Mapping[str, object]) -> str:
    return ", ".join(f"{k} {v}" for k, v in fields.items())


def _pct(c: Interval) -> str:
    return f"{c.estimate:+.1%} [{c.low:+.1%}, {c.high:+.1%}]"


def _interval(c: Interval | None) -> dict[str, float] | None:
    if c is None:
        return None
    return {"change": round(c.estimate, 5), "low": round(c.low, 5), "high": round(c.high, 5)}


@dataclass(frozen=True)
class AgainstEarlier:
    """No worse than the last accepted run, by a resolution: ``improved_by`` is the change an
    improvement must reach to be noted; the budget's hash and the class's sampling are this
    run's side of what differs."""

    ref: EarlierRun
    identity: Mapping[str, object]
    improved_by: float
    budget_sha256: str | None = None
    sampling: Mapping[str, object] = field(default_factory=dict)
    precise: bool = False

    def limits(self, limits: Limits) -> list[Limit]:
        decode = Limit(Threshold.BASELINE_DECODE, 1.0)
        return [decode, Limit(Threshold.BASELINE_ACCEPT, 1.0)] if self.ref.accept else [decode]

    def decide(self, t: Limit, m: Measurement, alpha: float, resolution: float,
               min_n: int) -> Decision:
        if t.threshold is Threshold.BASELINE_ACCEPT:
            other, values = self.ref.accept, accept_values(m)
        else:
            other, values = self.ref.decode, spec_rates(m)
        if other is None:
            return Decision(Side.UNSURE, 0)
        return speedup_decision(values, other, t.value, alpha, resolution, min_n)

    def changes(self, m: Measurement, level: float) -> tuple[Interval | None, Interval | None]:
        """This run's decode rate and accept length over the baseline's (relative)."""
        accept = self.ref.accept
        return (change(spec_rates(m), self.ref.decode, level),
                change(accept_values(m), accept, level) if accept else None)

    def evaluate(self, c: Context) -> Evaluation | None:
        """Still undecided when sampling ended: a note, not a failure: the two runs' requests
        cannot tell a change of the resolution from none."""
        decode_change, accept_change = self.changes(c.m, c.level)
        if decode_change is None:
            return None
        d = c.decisions or {}
        decode, accept = d.get(Threshold.BASELINE_DECODE), d.get(Threshold.BASELINE_ACCEPT)
        evidence = tuple(evidence_line(t, x, ">= the baseline") for t, x in
                         ((Threshold.BASELINE_DECODE, decode), (Threshold.BASELINE_ACCEPT, accept))
                         if x is not None)
        sides = [x.side for x in (decode, accept) if x is not None]
        notes, codes = self._notes(c, decode_change) if c.final else ((), ())
        if Side.BAD in sides:
            drafter = accept is not None and accept.side == Side.BAD
            return Evaluation(Side.BAD, "drafter" if drafter else "system", "regressed",
                              self._regression(c.f, decode_change, accept_change, drafter),
                              evidence=evidence, notes=notes, codes=codes)
        if (Side.UNSURE in sides or not sides) and c.final:
            notes = (f"note: decode {_pct(decode_change)} against {self.ref.label}: undecided "
                     f"(its {self.ref.decode.n} requests and these cannot tell a change of the "
                     "resolution from none; record baselines with --specbound-until-precise)",
                     *notes)
            return Evaluation(Side.OK, evidence=evidence, notes=notes, codes=codes)
        if Side.UNSURE in sides or not sides:
            return Evaluation(Side.UNSURE, pending=f"decode {_pct(decode_change)} vs "
                              f"{self.ref.label}", evidence=evidence)
        return Evaluation(Side.OK, evidence=evidence, notes=notes, codes=codes)

    def _notes(self, c: Context, decode: Interval) -> tuple[tuple[str, ...], tuple[Reason, ...]]:
        """What differs between the runs ("compared anyway"), and an improvement beyond
        ``improved_by`` (a note, never a failure)."""
        facts = RunFacts(c.m.info, c.m.backend or None, self.budget_sha256, self.sampling,
                         c.command)
        notes = [f"note: {x}: compared anyway" for x in differences(self.ref, self.identity, facts)]
        codes: list[Reason] = ["baseline_differs"] if notes else []
        if decode.low > 0 and decode.estimate >= self.improved_by:
            notes.append(f"note: decode improved {_pct(decode)} against {self.ref.label}")
            codes.append("improved")
        return tuple(notes), tuple(codes)

    def _regression(self, f: Figures, decode: Interval, accept: Interval | None,
                    drafter: bool) -> tuple[str, ...]:
        lines = [f"decode {_pct(decode)} against {self.ref.label}"]
        old_accept = self.ref.result.accept_length
        old = f"{old_accept:.2f}" if old_accept else "-"
        if drafter and accept is not None:
            lines.append(f"accept {f.accept:.2f} vs {old} in the baseline ({_pct(accept)}): "
                         "the drafter (or the prompts) changed")
        else:
            round_ms = self.ref.result.verdict.round_ms
            was = f"{round_ms:.2f} ms" if round_ms else "-"
            lines.append(f"per round {f.round_ms:.2f} ms vs {was} in the baseline at accept "
                         f"{f.accept:.2f} vs {old}: the system slowed down")
        return tuple(lines)

    def annotate(self, result: ClassResult, roof: Roofline, m: Measurement,
                 level: float) -> ClassResult:
        decode, accept = self.changes(m, level)
        tests = result.tests
        return replace(result, baseline={
            **self.ref.to_json(), "label": self.ref.label,
            "decode_change": _interval(decode), "accept_change": _interval(accept),
            "decode": tests.get(Threshold.BASELINE_DECODE.value),
            "accept": tests.get(Threshold.BASELINE_ACCEPT.value),
            "differences": differences(self.ref, self.identity, result)})


@dataclass(frozen=True)
class NoEarlier:
    """A class the baseline run lacks, or one it may not be compared with (``strict``): said
    in the verdict and the JSON, never a failure."""

    note: str = MISSING
    precise: bool = False

    def limits(self, limits: Limits) -> list[Limit]:
        return []

    def decide(self, t: Limit, m: Measurement, alpha: float, resolution: float,
               min_n: int) -> Decision:
        return Decision(Side.UNSURE, 0)

    def evaluate(self, c: Context) -> Evaluation | None:
        return Evaluation(Side.OK, notes=(self.note,), codes=("baseline_missing",))

    def annotate(self, result: ClassResult, roof: Roofline, m: Measurement,
                 level: float) -> ClassResult:
        return replace(result, baseline={"note": self.note.removeprefix("note: ")})
