"""``specbound plan-spec``'s measuring side: one budget class launched at given draft step counts
(and its twin without speculation), each measured at every level until its decode rate is known
to half the resolution; the plan (advisers/spec_plan.py) from the twin and two step counts, and the
recommended K measured once more. advisers/against_sweep.py measures every K instead, to hold the
plan against."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from functools import partial
from statistics import NormalDist, median, stdev

from pytest_specbound.advisers.spec_plan import (
    CONFIDENCE,
    Confirmation,
    LevelPlan,
    Measured,
    RoundModel,
    predict_level,
)
from pytest_specbound.errors import ConfigError
from pytest_specbound.gate.pipeline.plan import plan_class, server_config
from pytest_specbound.gate.pipeline.pool import ServerPool
from pytest_specbound.gate.pipeline.ready import ready_server
from pytest_specbound.gate.pipeline.runner import Hooks, judge_class, measure_class
from pytest_specbound.gate.pipeline.twins import Twins, plan_twin
from pytest_specbound.gate.references.drift import DEFAULT_RECHECK
from pytest_specbound.gate.schema.budget import Budget
from pytest_specbound.gate.schema.settings import Settings
from pytest_specbound.gate.verdicts.result import ClassResult
from pytest_specbound.physics.hardware import Hardware
from pytest_specbound.physics.roofline import draft_forwards
from pytest_specbound.physics.speculative import Speculation
from pytest_specbound.serving.connect import ServerConfig
from pytest_specbound.serving.twin import launch_family

Say = Callable[[str], None]
# the twin's two blocks further apart than this (later over first, less 1, either way): one of
# them is the box, not the server (once 67% apart on a 2-core box, and the plan's K then ran
# 0.85x when confirmed), so the twin is measured a third time and the median block taken
TWIN_DISAGREE = 0.25


def at_steps(budget: Budget, steps: int, settings: Settings) -> Budget:
    """The budget drafting ``steps`` tokens a round: its speculation and its launch command
    (chains only: a tree's width is the server's to choose per K)."""
    from pytest_specbound.serving.steps import with_steps

    spec = budget.speculation
    if spec.method == "none":
        raise ConfigError(f"{budget.origin('spec')}: the budget runs no speculation: nothing "
                          "to plan")
    if spec.draft_tokens != spec.steps:
        raise ConfigError(f"{budget.origin('spec')}: {spec.label} is a tree: plan-spec varies "
                          "a chain's step count")
    cfg = server_config(budget, settings)
    if not cfg.launch:
        raise ConfigError(f"{budget.origin('server')}: plan-spec launches the server at each "
                          "step count: give a launch command, not a url")
    launch = with_steps(cfg.launch, cfg.backend, steps, budget.origin("server") + ".launch")
    return replace(budget, speculation=Speculation(spec.method, steps, steps),
                   server=replace(cfg, launch=launch))


def units(spec: Speculation, steps: int) -> int:
    """What the draft cost's slope counts at ``steps``: draft forwards, or for a lookup
    drafter (no forwards) the tokens it drafts."""
    at = Speculation(spec.method, steps, steps)
    return draft_forwards(at) or steps


def measured_from(result: ClassResult, steps: int,
                  confidence: float = CONFIDENCE) -> Measured:
    """A measured step count from its class result: the per-user decode rate and accept length
    with their intervals (the mean of the timed requests' own, normal), and the acceptance per
    draft position where the server counted it (vLLM's per-request histogram)."""
    timed = [q for q in result.timed if q.decode_s > 0 and q.decode_tokens > 0]
    if not timed or result.decode_tok_s is None:
        raise ConfigError(f"{result.class_name} at K={steps}: no request was timed")
    rate = result.decode_tok_s
    accept = result.accept_length or 1.0
    rates = [q.decode_tokens / q.decode_s for q in timed]
    accepts = [q.accept_length for q in timed if q.accept_length is not None]
    return Measured(steps, rate, _interval(rate, rates, confidence), accept,
                    _interval(accept, accepts, confidence) if accepts else (accept, accept),
                    confidence, *_positions(result, steps))


def _interval(mid: float, values: Sequence[float], confidence: float) -> tuple[float, float]:
    if len(values) < 2:
        return mid, mid
    half = NormalDist().inv_cdf(0.5 + confidence / 2) * stdev(values) / math.sqrt(len(values))
    return mid - half, mid + half


def _positions(result: ClassResult, steps: int) -> tuple[tuple[float, ...], float]:
    """The acceptance of positions 1..K per drafting round, from vLLM's per-request
    ``acceptance_histogram`` (drafting rounds by accepted count), and the share of decode
    tokens from forwards that drafted nothing (each forward beyond vLLM's drafting rounds)."""
    total = [0] * (steps + 1)
    idle = decoded = 0.0
    for q in result.timed:
        metrics = (q.server or {}).get("metrics")
        spec = metrics.get("speculative_decoding") if isinstance(metrics, dict) else None
        hist = spec.get("acceptance_histogram") if isinstance(spec, dict) else None
        if isinstance(hist, list) and len(hist) == steps + 1 and q.accept_length:
            total = [t + int(h) for t, h in zip(total, hist, strict=True)]
            idle += max(0.0, q.decode_tokens / q.accept_length - sum(int(h) for h in hist))
            decoded += q.decode_tokens
    rounds = sum(total)
    if rounds == 0 or decoded <= 0:
        return (), 0.0
    return tuple(sum(total[i:]) / rounds for i in range(1, steps + 1)), idle / decoded


@dataclass
class SpecPlan:
    """The plan of one class: per level, every K's prediction and the recommendation; the
    launches and requests it took."""

    budget: str
    class_name: str
    hardware: str
    measured_steps: tuple[int, ...]
    steps: tuple[int, ...]
    levels: list[LevelPlan] = field(default_factory=list)
    launches: int = 0
    requests: int = 0
    commands: dict[int, str] = field(default_factory=dict)

    def to_json(self) -> dict[str, object]:
        return {"budget": self.budget, "class": self.class_name, "hardware": self.hardware,
                "measured_steps": list(self.measured_steps), "steps": list(self.steps),
                "launches": self.launches, "requests": self.requests,
                "commands": {str(k): v for k, v in sorted(self.commands.items())},
                "levels": [lv.to_json() for lv in self.levels]}


@dataclass
class Measurer:
    """Measures one class at a step count and level, counting launches and requests; a step
    count's server stops before the next one starts."""

    budget: Budget
    name: str
    hw: Hardware
    settings: Settings
    pool: ServerPool
    say: Say | None = None
    launches: int = 0
    requests: int = 0
    commands: dict[int, str] = field(default_factory=dict)
    keep_up: bool = False  # alternating blocks: on the CPU each step count's server stays up
    _current: tuple[int, ServerConfig] | None = None
    _twins: Twins | None = None
    _twin_warm: bool = False  # the twin's server has answered this measurer since its launch
    _base: dict[int, ClassResult] = field(default_factory=dict)  # the twin's first measurement

    @property
    def twins(self) -> Twins:
        if self._twins is None:
            self._twins = Twins(self.hw, replace(self.settings, speedup=True), self.pool,
                                self.say)
        return self._twins

    def _twin_server(self, level: int) -> ServerConfig:
        return plan_twin(self.budget, self.budget.classes[self.name], self.hw,
                         self.twins.settings, level).server

    def twin(self, levels: Sequence[int]) -> dict[int, ClassResult]:
        """The class without speculation at every level, first (once: measured again only by
        :meth:`twin_again`). On the CPU its server stays up beside the step counts' for
        :meth:`twin_again` (no relaunch); on a GPU it stops."""
        if all(level in self._base for level in levels):
            return {level: self._base[level] for level in levels}
        self.pool.stop_launched()
        self.twins.measure_all([(self.budget, self.name, level) for level in levels])
        found = {level: self.twins.get(self.budget, self.name, level) for level in levels}
        self._base.update(found)
        self._twin_warm = self.twins.servers_fit_together
        if not self._twin_warm:
            self.pool.stop_launched()
        self.launches += 1
        self.requests += sum(r.answered for r in found.values())
        return found

    def twin_again(self, levels: Sequence[int]) -> dict[int, ClassResult | None]:
        """The twin measured again after the step counts (the drift check, a few requests at
        each level; on a GPU a fresh launch per level, warmed by one request): None where it
        could not run."""
        return {level: self.block(0, level, DEFAULT_RECHECK) for level in levels}

    def _leave_current(self) -> None:
        """Stop the step count's server measured last (everything, on a GPU; nothing, on the
        CPU with ``keep_up``)."""
        if self._current is not None:
            if not self.twins.servers_fit_together:
                self.pool.stop_launched()
            elif not self.keep_up:
                self.pool.stop(self._current[1])
        self._current = None

    def at(self, steps: int, level: int, requests: int | None = None) -> ClassResult:
        """The class at ``steps`` and ``level``: until its rate is known to half the
        resolution, or exactly ``requests`` of it (a referee's block)."""
        variant = at_steps(self.budget, steps, self.settings)
        cls = variant.classes[self.name].without_limits()
        plan = plan_class(variant, cls, self.hw, replace(self.settings, url=None, launch=None),
                          level)
        plan = replace(plan, rule=plan.rule.to_half_resolution() if requests is None else
                       plan.rule.exactly(requests))
        if self._current is None or self._current[0] != steps:
            self._leave_current()
            self._current = steps, plan.server
        if not self.pool.running(plan.server):
            self.launches += 1
        self.commands[steps] = variant.server.launch or ""
        if self.say:
            self.say(f"measuring {plan.what} at K={steps}: {variant.server.launch}")
        measured = measure_class(plan, ready_server(plan, self.pool), Hooks(say=self.say))
        result = judge_class(plan, measured)
        self.requests += result.answered
        if self.say and result.decode_tok_s is not None:
            self.say(f"{plan.what} at K={steps}: {result.decode_tok_s:.1f} tok/s per user, "
                     f"accept {result.accept_length or 1:.2f} over {result.samples} requests")
        return result

    def block(self, steps: int, level: int, requests: int) -> ClassResult | None:
        """``requests`` of the class at ``steps`` (K = 0: its twin, on the CPU on its server
        kept up beside, a fresh one warmed by one unmeasured request; None where the twin could
        not run)."""
        if steps:
            return self.at(steps, level, requests)
        beside = self.twins.servers_fit_together
        self._leave_current()
        if not self.pool.running(self._twin_server(level)):
            self.launches += 1
            self._twin_warm = False
        if not self._twin_warm:
            warm = self.twins.recheck_twin(self.budget, self.name, level, 1, beside=True)
            self.requests += warm.answered if isinstance(warm, ClassResult) else 1
            self._twin_warm = beside and isinstance(warm, ClassResult)
        again = self.twins.recheck_twin(self.budget, self.name, level, requests, beside=True)
        if not beside:  # on a GPU the next step count's server needs the memory
            self.pool.stop_launched()
        if not isinstance(again, ClassResult):
            return None
        self.requests += again.answered
        return again

    def round_ms(self, steps: int, level: int) -> float:
        """The roofline's round at ``steps`` and this level's batch (no server needed)."""
        variant = at_steps(self.budget, steps, self.settings) if steps else replace(
            self.budget, speculation=Speculation("none", 0, 0), draft_model=None,
            draft_step_ms=0.0)
        cls = variant.classes[self.name].without_limits()
        return plan_class(variant, cls, self.hw, replace(self.settings, url=None, launch=None),
                          level).roof.round_ms


@dataclass(frozen=True)
class PlanAsk:
    """What to plan: the class, the two step counts measured, the step counts predicted, the
    levels, and whether the recommended K is measured once more."""

    name: str
    measure_steps: tuple[int, int]
    steps: tuple[int, ...]
    levels: tuple[int, ...]
    confirm: bool = True


def plan_spec(budget: Budget, hw: Hardware, settings: Settings, pool: ServerPool, ask: PlanAsk,
              say: Say | None = None) -> SpecPlan:
    """The twin and two step counts measured at every level, the twin again (the drift
    check: its two blocks pooled), every K in ``ask.steps`` predicted, and each recommended K
    measured once more (:func:`predict_plan`, then :func:`confirm_plan`)."""
    out, m = predict_plan(budget, hw, settings, pool, ask, say)
    if ask.confirm:
        confirm_plan(out, m)
    pool.stop_launched()
    return out


def predict_plan(budget: Budget, hw: Hardware, settings: Settings, pool: ServerPool,
                 ask: PlanAsk, say: Say | None = None,
                 m: Measurer | None = None) -> tuple[SpecPlan, Measurer]:
    """The plan before its confirmation (its launches and requests counted), and the
    measurer that measured it, its last step count's server still up. ``m``: a measurer of
    this budget, class and pool that may have measured the twin already."""
    name, measure_steps, steps, levels = ask.name, ask.measure_steps, ask.steps, ask.levels
    if name not in budget.classes:
        raise ConfigError(f"{budget.path}: no class '{name}'; valid: "
                          f"{', '.join(sorted(budget.classes))}")
    if len(set(measure_steps)) != 2 or min(measure_steps) < 1:
        raise ConfigError(f"--measure: two distinct step counts of at least 1, got "
                          f"{','.join(map(str, measure_steps))}")
    for k in (*measure_steps, *steps):  # every launch command made before the first launch
        at_steps(budget, k, settings)
    m = m or Measurer(budget, name, hw, settings, pool, say)
    base = m.twin(levels)
    points: dict[int, dict[int, ClassResult]] = {}
    for k in sorted(measure_steps):
        points[k] = {level: m.at(k, level) for level in levels}
    again = m.twin_again(levels)
    out = SpecPlan(str(budget.path), name, hw.label, tuple(sorted(measure_steps)), tuple(steps))
    cfg = server_config(budget, settings)
    vllm = launch_family(cfg.launch or "", cfg.backend) == "vllm"  # counts acceptance per position
    for level in levels:
        roofs = {k: m.round_ms(k, level) for k in {0, *steps, *measure_steps}}
        model = RoundModel(roofs.__getitem__, lambda k: units(budget.speculation, k),
                           _unit(budget.speculation))
        twin, drift, blocks = settled_twin(
            measured_from(base[level], 0), again.get(level),
            partial(m.block, 0, level, DEFAULT_RECHECK))
        plan = predict_level(level, twin,
                             [measured_from(points[k][level], k) for k in sorted(measure_steps)],
                             model, list(steps))
        if not plan.acceptance.measured and vllm:
            plan = replace(plan, acceptance=replace(plan.acceptance, how=(
                plan.acceptance.how + " (vLLM counts it per position with "
                "--per-request-spec-decode-metrics summary)")))
        out.levels.append(replace(plan, base_drift=drift, base_blocks=blocks))
    out.launches, out.requests, out.commands = m.launches, m.requests, dict(m.commands)
    return out, m


def confirm_plan(out: SpecPlan, m: Measurer) -> None:
    """Each level's recommended K measured once more on ``m`` (which measured the plan), its
    launches and requests added to the plan's."""
    by_k: dict[int, list[int]] = {}
    for i, plan in enumerate(out.levels):
        if plan.recommended:
            by_k.setdefault(plan.recommended, []).append(i)
    for k, where in sorted(by_k.items()):
        for i in where:
            plan = out.levels[i]
            once_more = measured_from(m.at(k, plan.concurrency), k)
            out.levels[i] = replace(plan, confirmation=Confirmation(
                once_more, once_more.rate / plan.base.rate if plan.base.rate > 0 else None))
    out.launches, out.requests, out.commands = m.launches, m.requests, dict(m.commands)


def settled_twin(first: Measured, later: ClassResult | None,
                 third: Callable[[], ClassResult | None]) -> tuple[Measured, float | None, int]:
    """The twin of a level from its blocks: the first alone where the block after the step
    counts timed nothing; the two pooled; or, where they lie more than :data:`TWIN_DISAGREE`
    apart, a third measured (``third``) and the three pooled about their median. Returns the
    twin, the drift between the first two blocks (None: one block) and the blocks pooled."""
    if later is None or not later.timed:
        return first, None, 1
    blocks = [first, measured_from(later, 0)]
    twin, drift = pooled(*blocks)
    if math.isfinite(drift) and abs(drift) > TWIN_DISAGREE:
        once_more = third()
        if once_more is not None and once_more.timed:
            blocks.append(measured_from(once_more, 0))
            twin, _ = pooled(*blocks)
    return twin, drift, len(blocks)


def pooled(first: Measured, later: Measured, *more: Measured) -> tuple[Measured, float]:
    """The twin's blocks (before and after the step counts, and any measured again) as one:
    the median rate (two blocks: their plain mean, the rate weighted by their requests' spread
    alike; three: the one the box moved least), the interval spanning every block's (the box's
    drift between them is the prediction's uncertainty too); and the drift, the second block
    over the first less 1."""
    blocks = (first, later, *more)
    rate = median(b.rate for b in blocks)
    low = min(b.rate_bounds[0] for b in blocks)
    high = max(b.rate_bounds[1] for b in blocks)
    return (replace(first, rate=rate, rate_bounds=(low, high)),
            later.rate / first.rate - 1 if first.rate > 0 else math.nan)


def _unit(spec: Speculation) -> str:
    return "drafted token" if draft_forwards(Speculation(spec.method, 1, 1)) == 0 else \
        "draft forward"
