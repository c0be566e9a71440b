"""The twin, a reference: every class that is compared with speculation off, measured on its
twin server first: one twin server at a time, each launched once, none while a speculative
server runs on a GPU (on the CPU they stay up for the drift check), and each base measured once
per run (under pytest-xdist, by the first worker that needs it). Its comparison:
:class:`~pytest_specbound.gate.references.against_twin.AgainstTwin`."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace

from pytest_specbound.errors import ConfigError, ServerError, SpecboundError
from pytest_specbound.gate.pipeline.plan import ClassPlan, plan_class, server_config
from pytest_specbound.gate.pipeline.pool import ServerPool
from pytest_specbound.gate.pipeline.ready import ready_server
from pytest_specbound.gate.pipeline.runner import Hooks, judge_class, measure_class
from pytest_specbound.gate.references.against_twin import AgainstTwin, asks_speedup, twin_sample
from pytest_specbound.gate.references.comparison import Comparison
from pytest_specbound.gate.references.drift import DEFAULT_RECHECK
from pytest_specbound.gate.references.reference import Planned, Wanted
from pytest_specbound.gate.references.store import Key, ReferenceStore
from pytest_specbound.gate.schema.budget import Budget
from pytest_specbound.gate.schema.class_budget import ClassBudget
from pytest_specbound.gate.schema.settings import Settings
from pytest_specbound.gate.schema.twin_table import NoSpeculation
from pytest_specbound.gate.verdicts.result import ClassResult
from pytest_specbound.physics.hardware import Hardware
from pytest_specbound.serving.connect import ServerConfig


@dataclass
class Twins:
    """The bases (classes measured without speculation) of a run, by budget, class and level."""

    hw: Hardware
    settings: Settings
    pool: ServerPool
    say: Callable[[str], None] | None = None
    _found: dict[Key, ClassResult | SpecboundError] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.store = ReferenceStore(self.pool.shared_dir, "twin")

    def measure_all(self, wanted: Iterable[tuple[Budget, str, int]]) -> None:
        """Measure every wanted base not yet measured in this run, grouped by twin server (each
        launched once, stopped before the next one and before any speculative server starts).
        Under pytest-xdist one worker measures them and the others read its results."""
        wanted = list(wanted)
        if not wanted:  # nothing to measure or read: no lock to take
            return
        with self.store.held():
            plans: list[tuple[Key, ClassPlan]] = []
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

    def _measure_grouped(self, plans: list[tuple[Key, ClassPlan]]) -> None:
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

    def recheck_twin(self, budget: Budget, name: str, level: int, requests: int,
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
            measured = measure_class(plan, ready_server(plan, self.pool), Hooks(say=say))
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

    # -- as a reference (pytest_specbound.gate.references.reference.Reference) ---------------
    def wants(self, budget: Budget, name: str) -> bool:
        return wants_twin(budget, budget.classes[name], self.settings)

    def prepare(self, wanted: Sequence[Wanted]) -> None:
        self.measure_all(wanted)

    def comparison(self, plan: Planned) -> Comparison:
        return AgainstTwin.of(self.get(plan.budget, plan.cls.name, plan.concurrency))

    def recheck_requests(self, plan: Planned) -> int:
        """``[no_speculation] recheck``, else the default where its server can run beside the
        speculative one (no relaunch)."""
        given = plan.budget.no_speculation.recheck if plan.budget.no_speculation else None
        if given is not None:
            return given
        return DEFAULT_RECHECK if self.beside(plan.budget) else 0

    def recheck(self, plan: Planned, requests: int, level: float) -> Comparison | SpecboundError:
        budget, name, at = plan.budget, plan.cls.name, plan.concurrency
        again = self.recheck_twin(budget, name, at, requests, self.beside(budget))
        if isinstance(again, SpecboundError):
            return again
        first = AgainstTwin.of(self.get(budget, name, at))  # the comparison the plan carries
        return first.after(again, level, plan.resolution / 2)

    def beside(self, budget: Budget) -> bool:
        """Whether the twin's server may run beside the speculative one: attached by url, or
        on the CPU (on a GPU, two launched servers may not fit in its memory)."""
        twin = budget.no_speculation
        return bool(twin and twin.url) or self.servers_fit_together


def wants_twin(budget: Budget, cls: ClassBudget, settings: Settings) -> bool:
    """Whether the class is also measured without speculation: the budget has a
    ``[no_speculation]`` table, the class (or one of its levels) sets a speedup floor, or
    ``--specbound-speedup`` asks for every budget."""
    if budget.speculation.method == "none":
        return False
    return settings.speedup or budget.no_speculation is not None or asks_speedup(cls)


def twin_server(budget: Budget, settings: Settings) -> ServerConfig:
    """The server without speculation: ``[no_speculation]``'s url or launch, else the
    speculative server's launch command with its speculation flags removed."""
    spec = server_config(budget, settings)
    twin = budget.no_speculation or NoSpeculation()
    base = replace(spec, url=None, launch=None)
    if twin.ready_timeout_s is not None:
        base = replace(base, ready_timeout_s=twin.ready_timeout_s)
    if twin.url:
        return replace(base, url=twin.url, origin=twin.origin)
    if twin.launch:
        return replace(base, launch=twin.launch)
    origin = "--specbound-launch" if settings.launch else budget.origin("server") + ".launch"
    if not spec.launch:
        raise ConfigError(f"{budget.origin('server')}: the server is attached by url, so its "
                          "twin without speculation cannot be derived: give [no_speculation] "
                          "url (or launch)")
    from pytest_specbound.serving.twin import without_speculation

    return replace(base, launch=without_speculation(spec.launch, spec.backend, origin))


def plan_twin(budget: Budget, cls: ClassBudget, hw: Hardware, settings: Settings,
              concurrency: int) -> ClassPlan:
    """The class at the level on the server without speculation: no thresholds; it stops once
    its decode rate is known to half the resolution (or at its sample budget)."""
    from pytest_specbound.physics.speculative import parse_speculation

    server = twin_server(budget, settings)
    twin = replace(budget, speculation=parse_speculation("none"), draft_model=None,
                   server=server, no_speculation=None, draft_step_ms=0.0, head_dtype=None,
                   hardware={})
    plan = plan_class(twin, cls.without_limits(), hw, replace(settings, url=None, launch=None),
                      concurrency)
    return replace(plan, rule=plan.rule.to_half_resolution())
