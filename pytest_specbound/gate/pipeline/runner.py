"""One class at one level as a pipeline: plan (:mod:`pytest_specbound.gate.pipeline.plan`) ->
a ready, checked server (:mod:`pytest_specbound.gate.pipeline.ready`) -> measure
(:func:`measure_class`, returning values) -> judge (:func:`judge_class`)."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import cast

from pytest_specbound.errors import ServerError
from pytest_specbound.gate.judging.judge import Judging, judge
from pytest_specbound.gate.judging.rule import Look, SequentialRule
from pytest_specbound.gate.pipeline.crosscheck import above_roofline, setting_findings
from pytest_specbound.gate.pipeline.measure_lock import exclusive_measurement
from pytest_specbound.gate.pipeline.plan import ClassPlan
from pytest_specbound.gate.pipeline.pool import ServerPool
from pytest_specbound.gate.pipeline.ready import ReadyServer, ready_server
from pytest_specbound.gate.schema.class_budget import ClassBudget
from pytest_specbound.gate.verdicts.result import ClassResult, RooflineFigures
from pytest_specbound.gate.verdicts.thresholds import at_percentile
from pytest_specbound.gate.verdicts.verdict import Verdict, batching_hint
from pytest_specbound.measure.dcgm import start_dcgm
from pytest_specbound.measure.load import measure_at
from pytest_specbound.measure.measurement import Measurement, Stop, Ttft
from pytest_specbound.measure.prefill import level_roofline
from pytest_specbound.measure.random_prompts import Built
from pytest_specbound.measure.sampler import Sampler, Stopping, Workload, requests_sent
from pytest_specbound.measure.telemetry import Telemetry, findings
from pytest_specbound.physics.hardware import Hardware
from pytest_specbound.serving.backends.base import Backend
from pytest_specbound.serving.connect import ServerConfig
from pytest_specbound.serving.records import JSONObject, ServerInfo
from pytest_specbound.serving.server import Server
from pytest_specbound.serving.settings import Served
from pytest_specbound.serving.transport import Endpoint


def gpu_telemetry(hw: Hardware, server: Server) -> Telemetry | None:
    """NVML sampling while a GPU class runs (None on the CPU, or without nvidia-ml-py)."""
    if hw.name == "cpu":
        return None
    from pytest_specbound.measure.telemetry import in_process_group, start_telemetry

    return start_telemetry(in_process_group(server.process.pid) if server.process else None)


def merged_telemetry(nvml: JSONObject | None, dcgm: JSONObject) -> JSONObject:
    """NVML's GPUs (this host's) and the DCGM exporters' (every node's) in one summary."""
    gpus = [g for part in (nvml or {}, dcgm) for g in cast(list[object], part.get("gpus") or [])]
    notes = [str(n) for n in ((nvml or {}).get("note"), dcgm.get("note")) if n]
    return {"gpus": gpus, **({"note": "; ".join(notes)} if notes else {})}


def measurement_identity(cfg: ServerConfig) -> str:
    """What the measurement lock is keyed on: the URL attached to, else the launch config."""
    if cfg.url:
        return cfg.url.rstrip("/").lower()
    return "launch " + cfg.key()


def worker_label() -> str:
    import os

    return f"pid {os.getpid()}" + (f", xdist {os.environ['PYTEST_XDIST_WORKER']}"
                                   if os.environ.get("PYTEST_XDIST_WORKER") else "")


@dataclass(frozen=True)
class Measured:
    """What measuring a plan returns: the rule's final look (the measurement, its transient
    excluded, every threshold's test and interval), the server's settings, the telemetry."""

    look: Look
    served: Served
    backend: Backend
    telemetry: JSONObject | None
    started: float  # wall clock when the class began
    command: str | None = None  # the server measured: its launch command, or its URL
    workload: JSONObject | None = None  # how its prompts were made (workload_of)


Progress = Callable[[Measurement], None]
Partial = Callable[[ClassResult], None]


@dataclass(frozen=True)
class Hooks:
    """Who hears about a class while it runs: ``on_record`` the measurement after each request,
    ``partial`` the result so far (and once more, marked interrupted, when Ctrl-C or SIGTERM
    ends it), ``say`` a line for the terminal."""

    on_record: Progress | None = None
    partial: Partial | None = None
    say: Callable[[str], None] | None = None


def measure_class(plan: ClassPlan, ready: ReadyServer, hooks: Hooks = Hooks()) -> Measured:
    """Measure the plan's class on its ready, checked server, under the measurement lock."""
    on_record, partial, say = hooks.on_record, hooks.partial, hooks.say
    server, backend, info, served = ready.server, ready.backend, ready.info, ready.served
    base = replace(base_result(plan), served=served.to_json())
    started = time.time()
    rule = plan.new_rule()
    last = Measurement(backend.name)

    def progress(cur: Measurement) -> None:
        nonlocal last
        last = cur
        if on_record and not cur.interrupted:
            on_record(cur)
        if partial:
            # the rule's own look where it looks (cached), else the requests so far untested
            look = rule.look(cur) if rule.looks_at(len(cur.records)) else Look(cur)
            partial(running_result(base, look, plan, started))

    try:
        with exclusive_measurement(measurement_identity(plan.server),
                                   f"{plan.what} ({worker_label()})", say):
            workload = workload_of(plan, backend, server, info)
            base = replace(base, workload=workload)
            m, telemetry = sample(plan, server, backend, info, rule, progress,
                                  served.speculative, ready.at)
    except KeyboardInterrupt:  # before sampling began (the lock, the warm-up): say so too
        if not last.interrupted:
            progress(replace(last, stop=Stop.INTERRUPTED, stopped="interrupted",
                             interrupted=True))
        raise
    death = server.death("while it was measured")  # its requests failed: say why, by signal
    if death:
        raise ServerError(death)
    m = with_log_cause(m, server)
    # the final look: the whole measurement, its transient excluded
    return Measured(rule.look(m), served, backend, telemetry, started, ready.command, workload)


def with_log_cause(m: Measurement, server: Server) -> Measurement:
    """A launched server's failed requests with the last error its log shows (a bare HTTP 500
    says only that something failed inside)."""
    if not m.failures or not server.owned:
        return m
    cause = server.log_cause()
    if not cause:
        return m
    said = f"; the server's log ({server.log_path}) ends on: {cause}"
    return replace(m, records=tuple(replace(r, error=r.error + said) if r.error else r
                                    for r in m.records))


def sample(plan: ClassPlan, server: Server, backend: Backend, info: ServerInfo,
           rule: SequentialRule, progress: Progress, drafting: bool | None = None,
           at: Endpoint | None = None) -> tuple[Measurement, JSONObject | None]:
    """The requests themselves (one stream, or a closed loop at the level), GPU telemetry
    sampled alongside. ``drafting``: the server said it speculates (a request it reports as
    drafting nothing then verified one token per step); ``at``: where its counters are read
    (the decode server's, where prefill and decode run apart)."""
    sampler = Sampler(server.endpoint, backend, plan.server.model_id, plan.roof.max_accept,
                      sampling=plan.cls.sampling, drafting=drafting,
                      metrics_endpoint=at or server.endpoint)
    prompts = plan.prompts
    if plan.cls.random is not None:
        prompts = random_built(plan, backend, server, info).prompts
    tele = gpu_telemetry(plan.hw, server)
    dcgm = start_dcgm(plan.budget.dcgm) if plan.budget.dcgm else None
    telemetry: JSONObject | None = None
    try:
        m = measure_at(sampler, plan.concurrency,
                       Workload(prompts, plan.cls.max_tokens, plan.warmup),
                       Stopping(rule, plan.max_seconds), progress, info)
    finally:
        telemetry = tele.stop() if tele else None
        if dcgm is not None:  # other nodes' GPUs (and this one's) through their exporters
            telemetry = merged_telemetry(telemetry, dcgm.stop())
        if telemetry is None and plan.hw.name != "cpu":
            telemetry = {"note": "no GPU telemetry: nvidia-ml-py is not installed "
                                 "(pip install 'pytest-specbound[gpu]')"}
    return m, telemetry


def random_built(plan: ClassPlan, backend: Backend, server: Server, info: ServerInfo) -> Built:
    """The random-prompt class's prompts, built with this server's tokenizer (kept)."""
    from pytest_specbound.gate.pipeline.random_workload import random_prompts

    spec = plan.cls.random
    assert spec is not None
    count = requests_sent(plan.rule.max_samples, plan.concurrency, plan.warmup)
    model_key = info.model_path or (info.models[0] if info.models else server.endpoint.base_url)
    return random_prompts(spec, count, backend.name, server.endpoint, plan.server.model_id,
                          model_key)


def workload_of(plan: ClassPlan, backend: Backend, server: Server, info: ServerInfo
                ) -> dict[str, object] | None:
    """How the class's prompts were made, for its result (:class:`PromptSet`'s, or the random
    prompts' lengths and how the server counted them)."""
    if plan.cls.random is None:
        return plan.workload.to_json() if plan.workload else None
    return random_built(plan, backend, server, info).to_json()


def judge_class(plan: ClassPlan, measured: Measured,
                say: Callable[[str], None] | None = None) -> ClassResult:
    """The plan's thresholds and comparisons against what was measured: the verdict, and each
    comparison's part of the result."""
    look, served, backend = measured.look, measured.served, measured.backend
    level = look.level or plan.rule.confidence
    said: list[str] = []

    def beaten(efficiency: float | None) -> str | None:
        line = above_roofline(plan.roof.hardware, efficiency)
        if line:
            said.append(line)
        return line

    how = Judging(plan.comparisons,
                  batching_hint(backend.name, backend.batching_setting, plan.concurrency,
                                served.slots, served.sources.get("slots", "")),
                  plan.rule.resolution, backend.cached_tokens_setting, level,
                  [*setting_findings(plan.hw, served), *findings(measured.telemetry)], beaten,
                  measured.command, drafter_classes(plan))
    verdict = judge(plan.cls, look.measurement, plan.roof, look.decisions, how=how)
    for line in said:
        if say:
            say(line)
    base = replace(base_result(plan), served=served.to_json(), telemetry=measured.telemetry,
                   command=measured.command)
    if measured.workload is not None:
        base = replace(base, workload=measured.workload)
    split = plan.budget.disaggregated
    if split is not None and plan.prefill_roof is not None:
        m = look.measurement
        prompts = [r.prompt_tokens for r in m.ok if r.prompt_tokens]
        base = replace(base, disaggregated=split.figures(prompts, plan.roof, plan.prefill_roof,
                                                         m.ttft_ms().median))
    result = replace(running_result(base, look, plan, measured.started),
                     verdict=verdict, partial=False)
    for comparison in plan.comparisons:
        result = comparison.annotate(result, plan.roof, look.measurement, level)
    return result


def drafter_classes(plan: ClassPlan) -> tuple[str, ...]:
    """The budget's classes that judge the drafter's accept band (unpinned, with a band)."""
    return tuple(name for name, c in plan.budget.classes.items()
                 if c.pin_accept is None and c.accept is not None)


def run_class(plan: ClassPlan, pool: ServerPool, hooks: Hooks = Hooks()) -> ClassResult:
    """Measure and judge one planned class at its level."""
    return judge_class(plan, measure_class(plan, ready_server(plan, pool), hooks), hooks.say)


def slo_figures(m: Measurement, cls: ClassBudget) -> tuple[Ttft, float | None]:
    """TPOT's median, p90 and p99, and the goodput where the class sets an SLO."""
    from pytest_specbound.gate.verdicts.thresholds import met, sets_slo
    from pytest_specbound.measure.proportion import percentile, tpot_values

    values = tpot_values(m)
    tpot = Ttft(*(percentile(values, q) for q in (0.5, 0.9, 0.99)))
    within = met(cls.limits, m) if sets_slo(cls.limits) else []
    return tpot, round(sum(within) / len(within), 4) if within else None


def base_result(plan: ClassPlan) -> ClassResult:
    """What a class result says before any request: the budget, the thresholds, the roofline."""
    budget, cls, roof = plan.budget, plan.cls, plan.roof
    return ClassResult(
        budget=str(budget.path), class_name=cls.name, hardware=plan.hw.label,
        verdict=Verdict("running"), budget_sha256=budget.sha256, model=roof.model.name,
        limits=dict(cls.limits), roofline=RooflineFigures.of(roof), partial=True,
        concurrency=plan.concurrency, level_ids=cls.level_ids, sampling=cls.sampling.given(),
        tpot_percentile=cls.tpot_percentile if at_percentile(cls.limits) else None,
        output_lengths=cls.output_lengths.to_json() if cls.output_lengths
        else {"max_tokens": cls.max_tokens}, pin_accept=cls.pin_accept,
        workload=plan.workload.to_json() if plan.workload else None)


def running_result(base: ClassResult, look: Look, plan: ClassPlan,
                   started: float) -> ClassResult:
    """``base`` with the measurement so far; an interrupted one is an error saying so."""
    m = look.measurement
    verdict = Verdict("error", ["interrupted"], ("interrupted",)) if m.interrupted \
        else base.verdict
    tpot, goodput = slo_figures(m, plan.cls)
    base = replace(base, tpot_ms=tpot, goodput=goodput)
    return replace(base.with_measurement(m), verdict=verdict,
                   bounds=dict(look.bounds) if look.bounds is not None else None,
                   roofline=(RooflineFigures.of(level_roofline(m, plan.roof)) if m.records
                             else base.roofline),
                   confidence_level=look.level or None, resolution=plan.rule.resolution,
                   tests=look.tests_json(), elapsed_s=round(time.time() - started, 3),
                   interrupted=m.interrupted)
