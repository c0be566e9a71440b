"""Run one prompt class of one budget on one hardware: roofline, server, measure, verdict."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

from pytest_specbound.errors import ConfigError, ServerError
from pytest_specbound.gate.budget import Budget, ClassBudget, ModelRef
from pytest_specbound.gate.crosscheck import beaten_cpu_ceiling, mismatches, setting_findings
from pytest_specbound.gate.measure_lock import exclusive_measurement
from pytest_specbound.gate.pool import ServerPool
from pytest_specbound.gate.result import ClassResult, RooflineFigures
from pytest_specbound.gate.rule import SequentialRule, resolution_of
from pytest_specbound.gate.settings import Settings
from pytest_specbound.gate.verdict import Verdict, batching_hint, explained, judge
from pytest_specbound.measure.load import CounterWindow, measure_closed_loop, stream_samplers
from pytest_specbound.measure.measurement import Measurement, Stop
from pytest_specbound.measure.prefill import level_roofline
from pytest_specbound.measure.prompts import load_prompts
from pytest_specbound.measure.sampler import Sampler, measure
from pytest_specbound.measure.telemetry import Telemetry, findings
from pytest_specbound.physics.hardware import Hardware, matched_to_server, server_threads
from pytest_specbound.physics.models import Model, load_model
from pytest_specbound.physics.overheads import overhead_for
from pytest_specbound.physics.roofline import Roofline, compute_roofline
from pytest_specbound.serving.connect import ServerConfig, placeholders
from pytest_specbound.serving.records import ServerInfo
from pytest_specbound.serving.server import Server, fill


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
    return compute_roofline(hw, model, budget.speculation, draft, budget.context,
                            batch or budget.batch, overhead, budget.origins, budget.draft_step_ms,
                            budget.head_dtype, overhead_source)


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
    """The compute thread count a launch command gives its server (``-t 4``, ``--threads=4``)."""
    import shlex

    try:
        argv = shlex.split(launch or "")
    except ValueError:
        return None
    for i, arg in enumerate(argv):
        flag, eq, value = arg.partition("=")
        if flag in THREAD_FLAGS:
            text = value if eq else (argv[i + 1] if i + 1 < len(argv) else "")
            if text.isdigit() and int(text) > 0:
                return int(text)
    return None


def server_config(budget: Budget, settings: Settings, marker_server: dict[str, Any] | None) -> ServerConfig:
    """Precedence: marker > command line > environment > ini > budget file."""
    cfg = budget.server
    if settings.url:
        cfg = replace(cfg, url=settings.url, launch=None, origin=settings.url_origin,
                      backend=settings.backend or cfg.backend)
    elif settings.launch:
        cfg = replace(cfg, launch=settings.launch, url=None)
    if settings.ca_bundle:
        cfg = replace(cfg, ca_bundle=settings.ca_bundle)
    if marker_server:
        cfg = replace(cfg, **marker_server)
    if not cfg.url and not cfg.launch:
        raise ConfigError(f"{budget.origin('server')}: no server to measure: give a launch command or "
                          "a url (or pass --specbound-url / set SPECBOUND_URL)")
    return cfg


def gpu_telemetry(hw: Hardware, server: Server) -> Telemetry | None:
    """NVML sampling while a GPU class runs (None on the CPU, or without nvidia-ml-py)."""
    if hw.name == "cpu":
        return None
    from pytest_specbound.measure.telemetry import in_process_group, start_telemetry

    return start_telemetry(in_process_group(server.process.pid) if server.process else None)


def launched_command(server: Server, cfg: ServerConfig) -> str | None:
    """The command the server was started with (placeholders filled), where we started it."""
    import shlex

    if isinstance(server.argv, list):
        return shlex.join(server.argv)
    return server.argv or cfg.launch


def measurement_identity(cfg: ServerConfig) -> str:
    """What the measurement lock is keyed on: the URL attached to, else the launch config."""
    if cfg.url:
        return cfg.url.rstrip("/").lower()
    return "launch " + cfg.key()


def worker_label() -> str:
    import os

    return f"pid {os.getpid()}" + (f", xdist {os.environ['PYTEST_XDIST_WORKER']}"
                                   if os.environ.get("PYTEST_XDIST_WORKER") else "")


def check_served_model(budget: Budget, info: ServerInfo, roof: Roofline) -> None:
    """The budget's model must be what the server serves (the ids it reports)."""
    served = [*info.models, *([info.model_path] if info.model_path else [])]
    if not served:
        return
    expected = [budget.model.served_name] if budget.model.served_name else [roof.model.name]
    norm = [_norm(e) for e in expected]
    if any(n and n in _norm(s) for n in norm for s in served):
        return
    raise ServerError(
        f"wrong model behind the server: budget {budget.path} expects '{expected[0]}', server "
        f"serves {', '.join(served)} (set [model] served_name, or [server] check_model = false)"
    )


def _norm(text: str) -> str:
    return "".join(ch for ch in text.lower().rsplit("/", 1)[-1] if ch.isalnum())


def run_class(
    budget: Budget, cls: ClassBudget, hw: Hardware, settings: Settings, pool: ServerPool,
    marker_server: dict[str, Any] | None = None,
    on_record: Callable[[Measurement], None] | None = None,
    partial: Callable[[ClassResult], None] | None = None,
    say: Callable[[str], None] | None = None,
    concurrency: int = 1,
) -> ClassResult:
    """Measure one class at one concurrency level and judge it. ``partial`` sees the result so
    far after each request (and once more, marked interrupted, when Ctrl-C or SIGTERM ends the
    measurement). At a level above 1 the roofline's batch is the level and the load is closed
    loop (:mod:`pytest_specbound.measure.load`)."""
    values: dict[str, str] = {}
    if needs_demo(budget):
        from pytest_specbound.physics.demo import demo_models

        values.update(demo_models())
    cls = cls.at(concurrency)
    roof = roofline_for(budget, hw, values, concurrency if cls.level_ids else None)
    cfg = server_config(budget, settings, marker_server)
    server, backend = pool.get(cfg, values, name=budget.path.stem)
    base = base_result(budget, cls, hw, roof, concurrency)
    started = time.time()
    rule = SequentialRule(cls, roof, settings.confidence, settings.min_samples,
                          cls.samples or settings.samples,
                          resolution_of(cls, settings.resolution))
    what = f"{budget.path.name}::{cls.name} at concurrency {concurrency} ({worker_label()})"
    last = [Measurement(backend.name)]

    def progress(cur: Measurement) -> None:
        last[0] = cur
        if on_record and not cur.interrupted:
            on_record(cur)
        if partial:
            partial(running_result(base, cur, rule, started))

    try:
        with exclusive_measurement(measurement_identity(cfg), what, say):
            info = backend.info(server.endpoint)
            if cfg.check_model:
                check_served_model(budget, info, roof)
            served = backend.served(server.endpoint, info, launched_command(server, cfg))
            base = replace(base, served=served.to_json())
            found = mismatches(budget, hw, served) if cfg.check_settings else []
            if found:
                raise ServerError("the server does not run what the budget describes: "
                                  + "; ".join(found) + " (set [server] check_settings = false "
                                  "to measure anyway)")
            sampler = Sampler(server.endpoint, backend, cfg.model_id, roof.max_accept)
            prompts = load_prompts(cls.prompts, budget.origin(f"classes.{cls.name}.prompts"))
            warmup = cls.warmup if cls.warmup is not None else settings.warmup
            tele = gpu_telemetry(hw, server)
            try:
                if concurrency == 1:
                    m = measure(sampler, prompts, cls.max_tokens, rule, warmup,
                                settings.max_seconds, progress, info=info)
                else:
                    m = measure_closed_loop(stream_samplers(sampler, concurrency), prompts,
                                            cls.max_tokens, rule, warmup, settings.max_seconds,
                                            progress, info=info,
                                            window=CounterWindow(backend, server.endpoint))
            finally:
                telemetry = tele.stop() if tele else None
                if telemetry is None and hw.name != "cpu":
                    telemetry = {"note": "no GPU telemetry: nvidia-ml-py is not installed "
                                         "(pip install 'pytest-specbound[gpu]')"}
                base = replace(base, telemetry=telemetry)
    except KeyboardInterrupt:  # before sampling began (lock, info, warm-up): say so too
        if not last[0].interrupted:
            progress(replace(last[0], stop=Stop.INTERRUPTED, stopped="interrupted",
                             interrupted=True))
        raise
    m = rule.settle(m)  # the final look: the whole measurement, its transient excluded
    hint = batching_hint(backend.name, backend.batching_setting, concurrency, served.slots,
                         served.sources.get("slots", ""))
    verdict = explained(judge(cls, m, roof, rule.last_decisions, batching=hint,
                              resolution=rule.resolution,
                              cached_tokens=backend.cached_tokens_setting),
                        [*setting_findings(hw, served), *findings(telemetry)],
                        cls.require_no_throttle)
    beaten = beaten_cpu_ceiling(roof.hardware, verdict.efficiency)
    if beaten:
        verdict = replace(verdict, lines=(*verdict.lines, beaten))
        if say:
            say(beaten)
    return replace(running_result(base, m, rule, started), verdict=verdict, partial=False)


def base_result(budget: Budget, cls: ClassBudget, hw: Hardware, roof: Roofline,
                concurrency: int = 1) -> ClassResult:
    """What a class result says before any request: the budget, the thresholds, the roofline."""
    return ClassResult(
        budget=str(budget.path), class_name=cls.name, hardware=hw.label,
        verdict=Verdict("running"), budget_sha256=budget.sha256, model=roof.model.name,
        accept_band=cls.accept, min_efficiency=cls.min_efficiency, min_tok_s=cls.min_tok_s,
        roofline=RooflineFigures.of(roof), partial=True, concurrency=concurrency,
        level_ids=cls.level_ids, max_ttft_ms=cls.max_ttft_ms)


def running_result(base: ClassResult, m: Measurement, rule: SequentialRule,
                   started: float) -> ClassResult:
    """``base`` with the measurement so far; an interrupted one is an error saying so."""
    verdict = Verdict("error", ["interrupted"], ("interrupted",)) if m.interrupted \
        else base.verdict
    roofline = RooflineFigures.of(level_roofline(m, rule.roof)) if m.records else base.roofline
    return replace(base.with_measurement(m), verdict=verdict, bounds=rule.last_bounds,
                   roofline=roofline,
                   confidence_level=rule.last_level or None, resolution=rule.resolution,
                   tests={k: d.to_json() for k, d in rule.last_decisions.items()},
                   elapsed_s=round(time.time() - started, 3), interrupted=m.interrupted)
