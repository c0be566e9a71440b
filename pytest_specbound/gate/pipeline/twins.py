"""Every class that is compared with speculation off, measured on its twin server first: one
twin server at a time, each launched once, none while a speculative server runs on a GPU (on
the CPU they stay up for the drift check), and each base measured once per run (under
pytest-xdist, by the first worker that needs it)."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace

from pytest_specbound.errors import ServerError, SpecboundError
from pytest_specbound.gate.pipeline.plan import ClassPlan, plan_twin
from pytest_specbound.gate.pipeline.pool import ServerPool
from pytest_specbound.gate.pipeline.runner import Hooks, judge_class, measure_class
from pytest_specbound.gate.references.against_twin import twin_sample
from pytest_specbound.gate.references.twin_store import TwinKey, TwinStore
from pytest_specbound.gate.schema.budget import Budget
from pytest_specbound.gate.schema.settings import Settings
from pytest_specbound.gate.verdicts.result import ClassResult
from pytest_specbound.physics.hardware import Hardware


@dataclass
class Twins:
    """The bases (classes measured without speculation) of a run, by budget, class and level."""

    hw: Hardware
    settings: Settings
    pool: ServerPool
    say: Callable[[str], None] | None = None
    _found: dict[TwinKey, ClassResult | SpecboundError] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.store = TwinStore(self.pool.shared_dir)

    def measure_all(self, wanted: Iterable[tuple[Budget, str, int]]) -> None:
        """Measure every wanted base not yet measured in this run, grouped by twin server (each
        launched once, stopped before the next one and before any speculative server starts).
        Under pytest-xdist one worker measures them and the others read its results."""
        wanted = list(wanted)
        if not wanted:  # nothing to measure or read: no lock to take
            return
        with self.store.held():
            plans: list[tuple[TwinKey, ClassPlan]] = []
            for budget, name, level in wanted:
                key = (str(budget.path), name, level)
                if key in self._found or key in {k for k, _ in plans}:
                    continue
                stored = self.store.load(key)
                if stored is not None:
                    self._found[key] = stored
                    continue
                try:
                    plans.append((key, plan_twin(budget, budget.classes[name], self.hw,
                                                 self.settings, level)))
                except SpecboundError as exc:
                    self._found[key] = exc
            if plans:
                self._measure_grouped(plans)

    def _measure_grouped(self, plans: list[tuple[TwinKey, ClassPlan]]) -> None:
        """On a GPU each twin server stops before the next starts, and the last before any
        speculative one (two may not fit in its memory); on the CPU they stay up, beside the
        speculative servers, for the drift check after each class (no relaunch)."""
        plans.sort(key=lambda kp: kp[1].server.key())  # stable: the run's order within a server
        one_at_a_time = not self.servers_fit_together
        if one_at_a_time:
            self.pool.stop_launched()
        current = None
        for key, plan in plans:
            if one_at_a_time and current is not None and plan.server.key() != current:
                self.pool.stop_launched()
            current = plan.server.key()
            self._found[key] = self._measure(plan)
            self.store.save(key, self._found[key])
        if one_at_a_time:
            self.pool.stop_launched()

    @property
    def servers_fit_together(self) -> bool:
        """Whether launched servers may run side by side: on the CPU (memory is not the GPU's),
        not on a GPU."""
        return self.hw.name == "cpu"

    def recheck(self, budget: Budget, name: str, level: int, requests: int,
                beside: bool) -> ClassResult | SpecboundError:
        """The twin measured again after its class, ``requests`` of it (the drift check).
        ``beside``: its server may run beside the speculative one (attached, or on the CPU);
        otherwise the launched servers stop first, and the next class launches its own again."""
        try:
            plan = plan_twin(budget, budget.classes[name], self.hw, self.settings, level)
        except SpecboundError as exc:
            return exc
        # one stream's server is warm from its first block: no warm-up request; several streams
        # keep theirs (they stagger the streams into the steady state the class measured)
        plan = replace(plan, rule=plan.rule.exactly(requests),
                       warmup=plan.warmup if level > 1 else 0)
        if not beside:
            self.pool.stop_launched()
        found = self._measure(plan, again=True)
        if not beside:
            self.pool.stop_launched()
        return found

    def _measure(self, plan: ClassPlan, again: bool = False) -> ClassResult | SpecboundError:
        say = self.say
        if say and again:
            say(f"measuring {plan.what} without speculation again (the drift check, "
                f"{plan.rule.max_samples} requests)")
        elif say:
            say(f"measuring {plan.what} without speculation"
                + (f": {plan.server.launch}" if plan.server.launch else f" at {plan.server.url}"))
        try:
            measured = measure_class(plan, self.pool, Hooks(say=say))
        except SpecboundError as exc:
            return ServerError(f"the server without speculation: {exc}")
        m = measured.look.measurement
        if not m.timed:
            why = m.failures[0].error if m.failures else "no request was timed"
            return ServerError(f"the server without speculation: {plan.what}: {why}")
        result = judge_class(plan, measured)
        if say:
            base = twin_sample(result)
            say(f"{plan.what} without speculation: {base.decode_tok_s:.1f} tok/s per user over "
                f"{base.n} requests ({measured.command})")
        return result

    def get(self, budget: Budget, name: str, level: int) -> ClassResult:
        """The twin's result of one class at one level; a ServerError saying why when there is
        none."""
        found = self._found.get((str(budget.path), name, level))
        if found is None:
            raise ServerError(f"{budget.path.name}::{name} at concurrency {level}: its base "
                              "without speculation was not measured")
        if isinstance(found, SpecboundError):
            raise found
        return found
