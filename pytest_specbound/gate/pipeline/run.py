"""One run of the gate, as the plugin and the CLI drive it: :meth:`GateRun.prepare` plans every
class the run will measure, with its comparisons (the twin without speculation, measured first
and once per run; the last accepted run), before the first speculative measurement; then
:meth:`GateRun.run` measures and judges one class at one level."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace

from pytest_specbound.errors import SpecboundError
from pytest_specbound.gate.pipeline.plan import ClassPlan, plan_class, wants_twin
from pytest_specbound.gate.pipeline.pool import ServerPool
from pytest_specbound.gate.pipeline.runner import Hooks, judge_class, measure_class, run_class
from pytest_specbound.gate.pipeline.twins import Twins
from pytest_specbound.gate.references.against_twin import AgainstTwin
from pytest_specbound.gate.references.baseline import BaselineRuns
from pytest_specbound.gate.references.comparison import Comparison
from pytest_specbound.gate.references.drift import DEFAULT_RECHECK
from pytest_specbound.gate.schema.budget import Budget
from pytest_specbound.gate.schema.settings import Settings
from pytest_specbound.gate.verdicts.result import ClassResult
from pytest_specbound.physics.hardware import Hardware

Wanted = tuple[Budget, str, int]  # a budget, one of its classes, one of its levels
PlanKey = tuple[str, str, int]


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
    # by key: the budget planned (a marker's budget shares its test file's path) and its plan
    _plans: dict[PlanKey, tuple[Budget, ClassPlan | SpecboundError]] = field(default_factory=dict)
    _baseline: BaselineRuns | None = None
    _twins: Twins | None = None

    def prepare(self, wanted: Iterable[Wanted]) -> None:
        """Plan each wanted class at its level, then measure the twins they compare with (one
        twin server at a time, before any speculative server starts), then add each plan's
        comparisons. A plan that cannot be made keeps its error for :meth:`run`."""
        if self.settings.baseline is not None and self._baseline is None:
            self._baseline = BaselineRuns(self.settings, self.identity())
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
        self.twins.measure_all([(b, n, lv) for key, b, n, lv in todo
                                if isinstance(self._plans[key][1], ClassPlan)
                                and wants_twin(b, b.classes[n], self.settings)])
        for key, budget, name, _ in todo:
            plan = self._plans[key][1]
            if isinstance(plan, ClassPlan):
                try:
                    plan = plan.comparing(*self._comparisons(budget, name, plan))
                    self._plans[key] = budget, plan
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
        """Measure and judge one class at one level, as planned; where the class is compared
        with its twin and the drift check is on, the twin is measured again between the two."""
        hooks = hooks or Hooks()
        plan = self.plan(budget, name, level)
        requests = self._recheck(budget, plan)
        if not requests:
            return run_class(plan, self.pool, hooks)
        measured = measure_class(plan, self.pool, hooks)
        again = self.twins.recheck(budget, name, level, requests, self._beside(budget))
        if isinstance(again, SpecboundError):  # said, and judged against the first block only
            if self.say:
                self.say(f"{plan.what}: the drift check could not run: {again}")
            return judge_class(plan, measured, hooks.say)
        level_of = measured.look.level or plan.rule.confidence
        plan = plan.with_comparisons(tuple(
            c.after(again, level_of, plan.rule.resolution / 2) if isinstance(c, AgainstTwin)
            else c
            for c in plan.comparisons))
        look = plan.new_rule().look(measured.look.measurement)
        return judge_class(plan, replace(measured, look=look), hooks.say)

    @property
    def twins(self) -> Twins:
        if self._twins is None:
            self._twins = Twins(self.hw, self.settings, self.pool, self.say)
        return self._twins

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

    def _recheck(self, budget: Budget, plan: ClassPlan) -> int:
        """Requests of the twin to measure again after the class: ``[no_speculation] recheck``,
        else the default where its server can run beside the speculative one (no relaunch)."""
        if not any(isinstance(c, AgainstTwin) for c in plan.comparisons):
            return 0
        given = budget.no_speculation.recheck if budget.no_speculation else None
        if given is not None:
            return given
        return DEFAULT_RECHECK if self._beside(budget) else 0

    def _beside(self, budget: Budget) -> bool:
        """Whether the twin's server may run beside the speculative one: attached by url, or
        on the CPU (on a GPU, two launched servers may not fit in its memory)."""
        twin = budget.no_speculation
        return bool(twin and twin.url) or self.twins.servers_fit_together

    def _comparisons(self, budget: Budget, name: str, plan: ClassPlan) -> list[Comparison]:
        found: list[Comparison] = []
        if wants_twin(budget, budget.classes[name], self.settings):
            found.append(AgainstTwin.of(self.twins.get(budget, name, plan.concurrency)))
        if self._baseline is not None:
            found.append(self._baseline.comparison(budget, plan.cls, plan.concurrency,
                                                   self.hw.label, plan.rule.resolution))
        return found
