"""One run of the gate, as the plugin and the CLI drive it: :meth:`GateRun.prepare` plans every
class the run will measure and lets each reference in :data:`REFERENCES` (the twin without
speculation, the last accepted run) measure or read what it compares with, once per run and
before the first speculative measurement; then :meth:`GateRun.run` measures and judges one
class at one level, rechecking a reference after it where that reference asks."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace

from pytest_specbound.errors import SpecboundError
from pytest_specbound.gate.pipeline.plan import ClassPlan, plan_class
from pytest_specbound.gate.pipeline.pool import ServerPool
from pytest_specbound.gate.pipeline.ready import ready_server
from pytest_specbound.gate.pipeline.runner import Hooks, judge_class, measure_class, run_class
from pytest_specbound.gate.pipeline.twins import Twins
from pytest_specbound.gate.references.baseline import BaselineRuns
from pytest_specbound.gate.references.reference import Reference, Wanted
from pytest_specbound.gate.schema.budget import Budget
from pytest_specbound.gate.schema.settings import Settings
from pytest_specbound.gate.verdicts.result import ClassResult
from pytest_specbound.physics.hardware import Hardware

PlanKey = tuple[str, str, int]


@dataclass(frozen=True)
class RunContext:
    """What a reference is made from: the run's hardware, settings, server pool, identity."""

    hw: Hardware
    settings: Settings
    pool: ServerPool
    identity: Callable[[], Mapping[str, object]] = dict
    say: Callable[[str], None] | None = None


# name -> the reference a run compares classes with (None: this run does not): the twin
# without speculation, the last accepted run; a new comparison is its module and one line here
ReferenceFactory = Callable[[RunContext], Reference | None]
REFERENCES: dict[str, ReferenceFactory] = {
    "twin": lambda run: Twins(run.hw, run.settings, run.pool, run.say),
    "baseline": lambda run: BaselineRuns(run.settings, run.identity())
    if run.settings.baseline is not None else None,
}


def levels_of(settings: Settings, budget: Budget, name: str) -> tuple[int, ...]:
    """The concurrency levels a class runs at: ``--specbound-concurrency``, else its own."""
    return settings.concurrency or budget.classes[name].concurrency


@dataclass
class GateRun:
    """The run's plans by budget, class and level (or why one could not be made)."""

    hw: Hardware
    settings: Settings
    pool: ServerPool
    identity: Callable[[], Mapping[str, object]] = dict  # this run's, for the baseline's notes
    say: Callable[[str], None] | None = None
    factories: Mapping[str, ReferenceFactory] = field(default_factory=lambda: REFERENCES)
    # by key: the budget planned (a marker's budget shares its test file's path) and its plan
    _plans: dict[PlanKey, tuple[Budget, ClassPlan | SpecboundError]] = field(default_factory=dict)
    # by key: the references that made each plan's comparisons, in the same order
    _compared_with: dict[PlanKey, tuple[Reference, ...]] = field(default_factory=dict)
    _references: dict[str, Reference] | None = None

    @property
    def references(self) -> dict[str, Reference]:
        """The references this run compares with, made from the table on first use."""
        if self._references is None:
            context = RunContext(self.hw, self.settings, self.pool, self.identity, self.say)
            made = {name: make(context) for name, make in self.factories.items()}
            self._references = {name: ref for name, ref in made.items() if ref is not None}
        return self._references

    def prepare(self, wanted: Iterable[Wanted]) -> None:
        """Plan each wanted class at its level, then let each reference measure or read what
        those classes compare with (the twin: one server at a time, before any speculative
        server starts), then add each plan's comparisons. A plan that cannot be made keeps its
        error for :meth:`run`."""
        references = self.references
        todo = [(self._key(b, n, level), self._on_hw(b), n, level) for b, n, level in wanted]
        todo = [t for t in todo if self._planned(t[0], t[1]) is None]
        told: set[tuple[str, str]] = set()
        for key, budget, name, level in todo:
            try:
                self._plans[key] = budget, self._plan(budget, name, level)
            except SpecboundError as exc:
                self._plans[key] = budget, exc
            plan = self._plans[key][1]
            if isinstance(plan, ClassPlan) and plan.workload and self.say \
                    and (key[0], name) not in told:  # what reading the set decided, once a class
                told.add((key[0], name))
                for note in plan.workload.notes():
                    self.say(f"{budget.path.name}::{name} prompts: {note}")
        planned = [(key, b, n, lv) for key, b, n, lv in todo
                   if isinstance(self._plans[key][1], ClassPlan)]
        for ref in references.values():
            ref.prepare([(b, n, lv) for _, b, n, lv in planned if ref.wants(b, n)])
        for key, budget, name, _ in planned:
            plan = self._plans[key][1]
            assert isinstance(plan, ClassPlan)
            users = tuple(r for r in references.values() if r.wants(budget, name))
            try:
                self._plans[key] = budget, plan.comparing(*(r.comparison(plan) for r in users))
                self._compared_with[key] = users
            except SpecboundError as exc:
                self._plans[key] = budget, exc

    def plan(self, budget: Budget, name: str, level: int) -> ClassPlan:
        """The class's plan at ``level``, made now where :meth:`prepare` did not (a marker's)."""
        key = self._key(budget, name, level)
        found = self._planned(key, self._on_hw(budget))
        if found is None:
            self.prepare([(budget, name, level)])
            found = self._plans[key][1]
        if isinstance(found, SpecboundError):
            raise found
        return found

    def run(self, budget: Budget, name: str, level: int,
            hooks: Hooks | None = None) -> ClassResult:
        """Measure and judge one class at one level, as planned; a reference that asks to be
        measured again after its class (the twin's drift check) is, and the class is judged
        against both of its blocks."""
        hooks = hooks or Hooks()
        plan = self.plan(budget, name, level)
        users = self._compared_with.get(self._key(budget, name, level), ())
        rechecks = [(i, ref, n) for i, ref in enumerate(users) if (n := ref.recheck_requests(plan))]
        if not rechecks:
            return run_class(plan, self.pool, hooks)
        measured = measure_class(plan, ready_server(plan, self.pool), hooks)
        level_of = measured.look.level or plan.rule.confidence
        comparisons = list(plan.comparisons)
        offset = len(comparisons) - len(users)  # the references' comparisons come last
        for i, ref, requests in rechecks:
            again = ref.recheck(plan, requests, level_of)
            if isinstance(again, SpecboundError):  # said, and judged against the first block
                if self.say:
                    self.say(f"{plan.what}: the drift check could not run: {again}")
                continue
            comparisons[offset + i] = again
        plan = plan.with_comparisons(tuple(comparisons))
        look = plan.new_rule().look(measured.look.measurement)
        return judge_class(plan, replace(measured, look=look), hooks.say)

    def _planned(self, key: PlanKey, budget: Budget) -> ClassPlan | SpecboundError | None:
        """The plan made for this very budget, if one was."""
        found = self._plans.get(key)
        return found[1] if found is not None and found[0] == budget else None

    def _key(self, budget: Budget, name: str, level: int) -> PlanKey:
        return str(budget.path), name, level

    def _on_hw(self, budget: Budget) -> Budget:
        return budget.for_hardware(self.hw.label)

    def _plan(self, budget: Budget, name: str, level: int) -> ClassPlan:
        cls = replace(budget.classes[name], concurrency=levels_of(self.settings, budget, name))
        return plan_class(budget, cls, self.hw, self.settings, level)
