"""Plan one class at one concurrency level: everything decided before a request is sent (the
roofline, the server to measure, the thresholds, the stopping rule's parameters, the prompts),
as one frozen value. Measuring and judging take the plan (:mod:`pytest_specbound.gate.pipeline.runner`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path

from pytest_specbound.errors import ConfigError
from pytest_specbound.gate.judging.rule import SequentialRule, resolution_of
from pytest_specbound.gate.references.comparison import Comparison
from pytest_specbound.gate.schema.budget import Budget, ModelRef
from pytest_specbound.gate.schema.class_budget import ClassBudget
from pytest_specbound.gate.schema.settings import Settings
from pytest_specbound.measure.lengths import class_seed, with_lengths
from pytest_specbound.measure.prompt_sets import PromptSet, select
from pytest_specbound.measure.prompts import load_set
from pytest_specbound.measure.sampler import requests_sent
from pytest_specbound.physics.hardware import Hardware, matched_to_server, server_threads
from pytest_specbound.physics.models import Model, load_model
from pytest_specbound.physics.overheads import overhead_for
from pytest_specbound.physics.roofline import Deployment, Roofline, compute_roofline
from pytest_specbound.serving.backends.base import Prompt
from pytest_specbound.serving.connect import ServerConfig, placeholders
from pytest_specbound.serving.server import fill
from pytest_specbound.serving.settings import int_flag


@dataclass(frozen=True)
class RuleParameters:
    """The stopping rule's settings for one class: confidence, sample counts, resolution."""

    confidence: float
    min_samples: int
    max_samples: int
    resolution: float
    precision: float | None = None  # a base (no thresholds) stops once its rate is this precise

    def to_half_resolution(self) -> RuleParameters:
        """Stop once the decode rate is known to half the resolution (a ratio of two rates is
        then known to the resolution)."""
        return replace(self, precision=-math.log(1 - self.resolution) / 2)

    def exactly(self, requests: int) -> RuleParameters:
        """``requests`` samples, no more and no fewer, whatever their precision."""
        return replace(self, min_samples=requests, max_samples=requests, precision=None)


@dataclass(frozen=True)
class ClassPlan:
    """One class at one level, decided before measuring."""

    budget: Budget
    cls: ClassBudget  # at the level: its thresholds there
    hw: Hardware
    roof: Roofline
    server: ServerConfig
    values: Mapping[str, str]  # placeholders filled in launch commands and model paths
    concurrency: int
    rule: RuleParameters
    prompts: tuple[Prompt, ...]
    warmup: int
    max_seconds: float | None
    comparisons: tuple[Comparison, ...] = ()  # the twin's, the last accepted run's
    workload: PromptSet | None = None  # how the prompt set was read (skips, turns)
    prefill_roof: Roofline | None = None  # prefill and decode apart: the prefill side's round

    @property
    def hardware(self) -> str:
        return self.hw.label

    @property
    def resolution(self) -> float:
        return self.rule.resolution

    def new_rule(self) -> SequentialRule:
        p = self.rule
        return SequentialRule(self.cls, self.roof, p.confidence, p.min_samples, p.max_samples,
                              p.resolution, self.comparisons, p.precision)

    def comparing(self, *comparisons: Comparison) -> ClassPlan:
        """This plan with ``comparisons`` added; one that needs a precise decode rate (the
        twin's ratio) stops only once it is known to half the resolution."""
        rule = self.rule
        if any(c.precise for c in comparisons) and rule.precision is None:
            rule = rule.to_half_resolution()
        return replace(self, comparisons=(*self.comparisons, *comparisons), rule=rule)

    def with_comparisons(self, comparisons: tuple[Comparison, ...]) -> ClassPlan:
        """This plan with its comparisons replaced (one measured again, say)."""
        return replace(self, comparisons=comparisons)

    @property
    def what(self) -> str:
        return f"{self.budget.path.name}::{self.cls.name} at concurrency {self.concurrency}"


def plan_class(budget: Budget, cls: ClassBudget, hw: Hardware, settings: Settings,
               concurrency: int = 1) -> ClassPlan:
    """The plan of ``cls`` at ``concurrency``: at a level above 1 the roofline's batch is the
    level (a class that lists levels runs each as its own item). Its comparisons are added
    with :meth:`ClassPlan.comparing`."""
    values: dict[str, str] = {}
    if needs_demo(budget):
        from pytest_specbound.physics.demo import demo_models

        values.update(demo_models())
    cls = cls.at(concurrency)
    prefill_roof = None
    if budget.disaggregated is not None:  # the roofline is the decode side's own
        hw, prefill_hw = budget.disaggregated.sides(hw)
        prefill_roof = roofline_for(budget, prefill_hw, values)
    random = cls.random
    # random prompts: the KV read follows the asked lengths
    sized = replace(budget, context=random.mean_context) if random is not None else budget
    roof = roofline_for(sized, hw, values, concurrency if cls.level_ids else None)
    resolution = resolution_of(cls, settings.resolution)
    # asked for: a baseline for later runs, to a quarter of the resolution, so that its own
    # interval leaves the two-sample test room
    precise = -math.log(1 - resolution) / 4 if settings.until_precise else None
    rule = RuleParameters(settings.confidence, settings.min_samples,
                          cls.samples or settings.samples, resolution, precise)
    origin = budget.origin(f"classes.{cls.name}.prompts")
    workload = None if random is not None else load_set(
        cls.prompts, origin, cls.turns, cls.max_tokens if cls.output_given else None)
    # random prompts are built at the server, by its tokenizer (gate/pipeline/random_workload.py)
    prompts = tuple(select(workload.prompts, cls.category, origin)) if workload else ()
    warmup = cls.warmup if cls.warmup is not None else settings.warmup
    if cls.output_lengths is not None and prompts:  # the same draws in every run of the class
        prompts = with_lengths(prompts, cls.output_lengths,
                               requests_sent(rule.max_samples, concurrency, warmup),
                               class_seed(f"{budget.path.name}::{cls.name}"))
    server = server_config(budget, settings)
    if cls.pin_accept is not None:
        from pytest_specbound.serving.pinning import pinned

        server = pinned(server, cls.pin_accept, budget.speculation.steps,
                        budget.origin(f"classes.{cls.name}.pin_accept"))
    return ClassPlan(budget, cls, hw, roof, server, values, concurrency, rule, prompts, warmup,
                     settings.max_seconds,
                     workload=replace(workload, prompts=prompts) if workload else None,
                     prefill_roof=prefill_roof)


def needs_demo(budget: Budget) -> bool:
    texts = [budget.model.spec, budget.server.launch or ""]
    if budget.draft_model:
        texts.append(budget.draft_model.spec)
    return any("{demo_" in t for t in texts)


def model_spec(ref: ModelRef, values: dict[str, str], base: Path) -> str:
    """The model reference with placeholders filled; a relative path found beside the budget."""
    spec = fill(ref.spec, values)
    path = base / spec
    return str(path) if not Path(spec).is_absolute() and path.exists() else spec


def resolve_model(ref: ModelRef, values: dict[str, str], base: Path, origin: str) -> Model:
    return load_model(model_spec(ref, values, base), ref.dtype, origin)


PREFILL_TOKENS = 512  # a prompt-sized batch: llama-bench's default, near its kernels' peak


def roofline_for(budget: Budget, hw: Hardware, values: dict[str, str],
                 batch: int | None = None) -> Roofline:
    """The budget's roofline on ``hw``; ``batch`` (a concurrency level) overrides its batch."""
    base = budget.path.parent
    model = resolve_model(budget.model, values, base, budget.origin("model"))
    draft = (resolve_model(budget.draft_model, values, base, budget.origin("draft_model"))
             if budget.draft_model else None)
    if hw.name == "cpu":  # what the server sees: its threads, its working set, its kernels
        threads = budget.threads or threads_from_launch(budget.server.launch)
        reads = model.weight_bytes + (draft.weight_bytes if draft else 0.0)
        level = batch or budget.batch
        n = server_threads(hw, threads)
        kernels = server_kernels(budget, model, values, n, budget.speculation.verify_tokens * level)
        # several sequences: others' prompts are computed in their rounds (Roofline.prefill_ms)
        prefill = (server_kernels(budget, model, values, n, PREFILL_TOKENS)
                   if kernels and level > 1 else None)
        hw = matched_to_server(hw, threads, reads, kernels, prefill)
    overhead, overhead_source = (
        (budget.overhead_ms, budget.origin("overhead_ms")) if budget.overhead_ms is not None
        else overhead_for(budget.server.backend))
    if budget.nodes is not None:
        hw = hw.on_nodes(budget.nodes, budget.origin("nodes"))
    layout = budget.layout.on(hw.count) if budget.layout else None
    return compute_roofline(hw, model, budget.speculation, draft,
                            Deployment(budget.context, batch or budget.batch, overhead,
                                       budget.draft_step_ms, overhead_source, layout),
                            budget.head_dtype, budget.origins)


def server_kernels(budget: Budget, model: Model, values: dict[str, str], threads: int,
                   tokens: int) -> tuple[float, str] | None:
    """(TFLOP/s, source) of llama.cpp's own kernels on the served GGUF over one verify step's
    ``tokens``, from the ``llama-bench`` beside the launch command's ``llama-server``; None for
    other servers and models."""
    from pytest_specbound.physics.kernel_probe import bench_beside, kernel_tokens_per_s

    bench = bench_beside(fill(budget.server.launch or "", {**placeholders(), **values}))
    gguf = Path(model_spec(budget.model, values, budget.path.parent))
    if bench is None or gguf.suffix != ".gguf" or not gguf.is_file():
        return None
    measured = kernel_tokens_per_s(bench, gguf, threads, tokens)
    if measured is None:
        return None
    rate, source = measured
    return 2 * model.active_params * rate / 1e12, source


THREAD_FLAGS = ("-t", "--threads")  # llama-server; other CPU servers: [roofline] threads


def threads_from_launch(launch: str | None) -> int | None:
    """The compute thread count a launch command gives its server (``-t 4``, ``--threads=4``;
    the last one given, as the server's own parser and the settings cross-check read it)."""
    import shlex

    try:
        argv = shlex.split(launch or "")
    except ValueError:
        return None
    threads, _ = int_flag(argv, *THREAD_FLAGS)
    return threads if threads else None


def server_config(budget: Budget, settings: Settings) -> ServerConfig:
    """Precedence: command line > environment > ini > budget file (a marker is a budget)."""
    cfg = budget.server
    if settings.url:
        cfg = replace(cfg, url=settings.url, launch=None, origin=settings.url_origin,
                      backend=settings.backend or cfg.backend)
    elif settings.launch:
        cfg = replace(cfg, launch=settings.launch, url=None)
    if settings.ca_bundle:
        cfg = replace(cfg, ca_bundle=settings.ca_bundle)
    if cfg.launch and "{steps}" in cfg.launch:  # the budget's own step count (plan-spec sets others)
        cfg = replace(cfg, launch=cfg.launch.replace("{steps}", str(budget.speculation.steps)))
    if not cfg.url and not cfg.launch:
        raise ConfigError(f"{budget.origin('server')}: no server to measure: give a launch command or "
                          "a url (or pass --specbound-url / set SPECBOUND_URL)")
    return cfg
