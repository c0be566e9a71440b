"""Against the last accepted run: the earlier results (a file, or a folder of them as CI
artifacts leave them) matched to each class and level, what differs between the two runs, and
the per-request figures the two-sample test compares (:mod:`pytest_specbound.measure.speedup`)."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from pytest_specbound.errors import ConfigError
from pytest_specbound.gate.budget import Budget
from pytest_specbound.gate.identity import machine_text
from pytest_specbound.gate.result import ClassResult, basename
from pytest_specbound.gate.settings import Settings
from pytest_specbound.gate.verdict import Reason
from pytest_specbound.measure.speedup import Baseline, Earlier
from pytest_specbound.serving.records import RequestRecord

Key = tuple[str, str, int, str]  # budget file name, class, level, hardware label
MATCH_MODES = ("warn", "strict")


def key_of(r: ClassResult) -> Key:
    return basename(r.budget), r.class_name, r.concurrency, r.hardware


@dataclass(frozen=True)
class Reference:
    """One class at one level of the baseline run, with that run's identity."""

    result: ClassResult
    identity: Mapping[str, object] = field(default_factory=dict)
    path: str = ""

    @property
    def decode(self) -> Baseline:
        return Baseline(tuple(q.decode_tokens / q.decode_s for q in self._timed()), (), 0.0, 0.0)

    @property
    def accept(self) -> Baseline | None:
        values = [q.decode_tokens / q.verify_steps for q in self._timed() if q.verify_steps]
        return Baseline(tuple(values), (), 0.0, 0.0) if len(values) >= 2 else None

    def _timed(self) -> list[RequestRecord]:
        skip = self.result.transient
        return [q for q in list(self.result.requests)[skip:] if q.ok and q.decode_s > 0]

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


def earlier_of(ref: Reference) -> Earlier:
    """The reference as the two-sample test and the verdict read it."""
    return Earlier(ref.decode, ref.accept, ref.label, ref.result.accept_length,
                   ref.result.verdict.round_ms)


def refused(ref: Reference, identity: Mapping[str, object], budget_sha256: str | None,
            mode: str) -> str | None:
    """Why the baseline is not compared (``strict``: another machine, or another budget), else
    None; the same differences are notes in ``warn`` mode."""
    if mode != "strict":
        return None
    then, now = machine_text(ref.identity), machine_text(identity)
    if ref.identity and then != now:
        return f"baseline ran on {then}; this run on {now}: not compared (strict)"
    if ref.result.budget_sha256 and budget_sha256 and ref.result.budget_sha256 != budget_sha256:
        return "the budget file changed since the baseline: not compared (strict)"
    return None


def with_comparison(result: ClassResult, ref: Reference, identity: Mapping[str, object],
                    improved_by: float) -> ClassResult:
    """``result`` with the comparison in its JSON (``baseline``) and its notes in the verdict:
    what differs between the runs ("compared anyway"), and an improvement beyond the
    resolution (a note, never a failure)."""
    from dataclasses import replace

    from pytest_specbound.measure.speedup import change

    level = result.confidence_level or 0.9
    rates = [q.decode_tokens / q.decode_s for q in result.requests[result.transient:]
             if q.ok and q.decode_s > 0]
    decode = change(rates, ref.decode, level)
    accepts = [q.decode_tokens / q.verify_steps for q in result.requests[result.transient:]
               if q.ok and q.decode_s > 0 and q.verify_steps]
    accept = change(accepts, ref.accept, level) if ref.accept and len(accepts) >= 2 else None
    notes = [f"note: {d}: compared anyway" for d in differences(ref, identity, result)]
    reasons: list[Reason] = ["baseline_differs"] if notes else []
    if decode is not None and decode.low > 0 and decode.estimate >= improved_by:
        notes.append(f"note: decode improved {decode.estimate:+.1%} [{decode.low:+.1%}, "
                     f"{decode.high:+.1%}] against {ref.label}")
        reasons.append("improved")
    v = result.verdict
    verdict = replace(v, lines=(*v.lines, *notes), reasons=(*v.reasons, *reasons))
    tests = result.tests
    return replace(result, verdict=verdict, baseline={
        **ref.to_json(), "label": ref.label,
        "decode_change": _interval(decode), "accept_change": _interval(accept),
        "decode": tests.get("baseline_decode_tok_s"), "accept": tests.get("baseline_accept_length"),
        "differences": differences(ref, identity, result)})


def _interval(c: object) -> dict[str, float] | None:
    from pytest_specbound.measure.stats import Interval

    if not isinstance(c, Interval):
        return None
    return {"change": round(c.estimate, 5), "low": round(c.low, 5), "high": round(c.high, 5)}


def differences(ref: Reference, identity: Mapping[str, object], current: ClassResult
                ) -> list[str]:
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


class References:
    """Every class result of the baseline files, newest run first for each class and level."""

    def __init__(self, path: Path, origin: str = "--specbound-baseline") -> None:
        files = sorted(path.glob("**/*.json")) if path.is_dir() else [path]
        if not path.exists():
            raise ConfigError(f"{origin}={path}: no such file or folder")
        self.found: dict[Key, Reference] = {}
        runs = [run for f in files for run in _read(f, origin, strict=not path.is_dir())]
        runs.sort(key=lambda run: str(run[1].get("created") or ""))  # the newest wins
        for results, identity, where in runs:
            for r in results:
                if not r.partial and r.requests:
                    self.found[key_of(r)] = Reference(r, identity, where)
        if not self.found:
            raise ConfigError(f"{origin}={path}: holds no complete class results")

    def find(self, key: Key) -> Reference | None:
        return self.found.get(key)


Run = tuple[Sequence[ClassResult], Mapping[str, object], str]


def _read(path: Path, origin: str, strict: bool) -> list[Run]:
    """One results file's classes and its run's identity; in a folder, files that are not
    specbound results are skipped, a named file that is not one is an error."""
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
        if not isinstance(doc, dict) or not isinstance(doc.get("results"), list):
            raise ValueError("no 'results' list")
        results = [ClassResult.from_json(e) for e in doc["results"] if isinstance(e, dict)]
    except (OSError, ValueError) as exc:
        if strict:
            raise ConfigError(f"{origin}={path}: not a specbound results file ({exc})") from None
        return []
    run = doc.get("run")
    found = run.get("identity") if isinstance(run, dict) else None
    identity: dict[str, object] = dict(found) if isinstance(found, dict) else {}
    if not identity.get("created") and doc.get("created"):
        identity["created"] = doc["created"]
    return [(results, identity, str(path))]


@dataclass(frozen=True)
class Comparison:
    """What one class compares with: the reference and the test's side, or why not."""

    reference: Reference | None
    earlier: Earlier | None
    note: str | None = None  # no baseline for the class, or refused (strict)


class BaselineRuns:
    """``--specbound-baseline`` for a run: the references, matched and judged per class."""

    def __init__(self, settings: Settings, identity: Mapping[str, object]) -> None:
        assert settings.baseline is not None
        self.references = References(settings.baseline, settings.baseline_origin)
        self.identity = identity
        self.mode = settings.baseline_match
        self.resolution = settings.resolution

    def reference(self, budget: Budget, name: str, level: int, hardware: str) -> Comparison:
        ref = self.references.find((budget.path.name, name, level, hardware))
        if ref is None:
            return Comparison(None, None, "note: no baseline for this class and level (a new "
                              "class, or one the baseline run did not finish): not compared")
        why = refused(ref, self.identity, budget.sha256, self.mode)
        if why:
            return Comparison(None, None, f"note: {why}")
        return Comparison(ref, earlier_of(ref))

    def judged(self, result: ClassResult, compare: Comparison | None) -> ClassResult:
        from dataclasses import replace

        if compare is None:
            return result
        if compare.reference is None:
            v = result.verdict
            note = compare.note or ""
            return replace(result, verdict=replace(v, lines=(*v.lines, note),
                                                   reasons=(*v.reasons, "baseline_missing")),
                           baseline={"note": note.removeprefix("note: ")})
        return with_comparison(result, compare.reference, self.identity,
                               result.resolution or self.resolution)
