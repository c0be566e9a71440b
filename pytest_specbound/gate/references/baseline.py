"""The last accepted run's results (a file, or a folder of them as CI artifacts leave them),
matched to each class and level as the comparison its plan carries
(:mod:`pytest_specbound.gate.references.against_earlier`)."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path

from pytest_specbound.errors import ConfigError, SpecboundError
from pytest_specbound.gate.references.against_earlier import AgainstEarlier, EarlierRun, NoEarlier
from pytest_specbound.gate.references.comparison import Comparison
from pytest_specbound.gate.references.identity import machine_text
from pytest_specbound.gate.references.reference import Planned, Wanted
from pytest_specbound.gate.schema.budget import Budget
from pytest_specbound.gate.schema.class_budget import ClassBudget
from pytest_specbound.gate.schema.settings import Settings
from pytest_specbound.gate.verdicts.result import ClassResult, basename

Key = tuple[str, str, int, str]  # budget file name, class, level, hardware label
MATCH_MODES = ("warn", "strict")


def key_of(r: ClassResult) -> Key:
    return basename(r.budget), r.class_name, r.concurrency, r.hardware


def refused(ref: EarlierRun, identity: Mapping[str, object], budget_sha256: str | None,
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


class EarlierRuns:
    """Every class result of the baseline files, newest run first for each class and level."""

    def __init__(self, path: Path, origin: str = "--specbound-baseline") -> None:
        files = sorted(path.glob("**/*.json")) if path.is_dir() else [path]
        if not path.exists():
            raise ConfigError(f"{origin}={path}: no such file or folder")
        self.found: dict[Key, EarlierRun] = {}
        runs = [run for f in files for run in _read(f, origin, strict=not path.is_dir())]
        runs.sort(key=lambda run: str(run[1].get("created") or ""))  # the newest wins
        for results, identity, where in runs:
            for r in results:
                if not r.partial and r.requests:
                    self.found[key_of(r)] = EarlierRun(r, identity, where)
        if not self.found:
            raise ConfigError(f"{origin}={path}: holds no complete class results")

    def find(self, key: Key) -> EarlierRun | None:
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


class BaselineRuns:
    """``--specbound-baseline`` for a run, a reference: the files read once, matched per class
    and level, as the comparison each class's plan carries."""

    def __init__(self, settings: Settings, identity: Mapping[str, object]) -> None:
        assert settings.baseline is not None
        self.references = EarlierRuns(settings.baseline, settings.baseline_origin)
        self.identity = identity
        self.mode = settings.baseline_match

    def compared(self, budget: Budget, cls: ClassBudget, level: int, hardware: str,
                 resolution: float) -> AgainstEarlier | NoEarlier:
        """The class at ``level`` against its reference (``resolution``: the change an
        improvement must reach to be noted), or a note saying why it is not compared."""
        ref = self.references.find((budget.path.name, cls.name, level, hardware))
        if ref is None:
            return NoEarlier()
        why = refused(ref, self.identity, budget.sha256, self.mode)
        if why:
            return NoEarlier(f"note: {why}")
        return AgainstEarlier(ref, self.identity, resolution, budget.sha256, cls.sampling.given())

    # -- as a reference (pytest_specbound.gate.references.reference.Reference) ---------------
    def wants(self, budget: Budget, name: str) -> bool:
        return True  # every class: one missing from the baseline is a note

    def prepare(self, wanted: Sequence[Wanted]) -> None:
        """Nothing to measure: the files were read when the run began."""

    def comparison(self, plan: Planned) -> Comparison:
        return self.compared(plan.budget, plan.cls, plan.concurrency, plan.hardware,
                             plan.resolution)

    def recheck_requests(self, plan: Planned) -> int:
        return 0  # an earlier run is not measured again

    def recheck(self, plan: Planned, requests: int, level: float) -> Comparison | SpecboundError:
        return self.comparison(plan)
