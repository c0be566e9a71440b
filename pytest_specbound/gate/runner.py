"""Run one prompt class of one budget on one hardware: roofline, server, measure, verdict."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from pytest_specbound.errors import ConfigError, ServerError
from pytest_specbound.gate.budget import Budget, ClassBudget, ModelRef
from pytest_specbound.gate.measure_lock import exclusive_measurement
from pytest_specbound.gate.pool import ServerPool
from pytest_specbound.gate.settings import Settings
from pytest_specbound.gate.verdict import Verdict, judge
from pytest_specbound.measure.prompts import load_prompts
from pytest_specbound.measure.sampler import Measurement, Sampler, Stop, measure
from pytest_specbound.measure.stats import bounds, look_level, look_schedule
from pytest_specbound.physics.hardware import Hardware
from pytest_specbound.physics.models import Model, load_model
from pytest_specbound.physics.roofline import Roofline, compute_roofline
from pytest_specbound.serving.connect import ServerConfig
from pytest_specbound.serving.records import RequestRecord


@dataclass
class SequentialRule:
    """Stop at the first look whose verdict is decided (pass or fail), or at the budget."""

    budget: ClassBudget
    roof: Roofline
    confidence: float
    min_samples: int
    max_samples: int
    last_bounds: dict[str, tuple[float, float]] | None = None
    last_level: float = 0.0
    looks: int = 0

    def __post_init__(self) -> None:
        self.schedule = look_schedule(self.min_samples, self.max_samples)

    @property
    def sample_budget(self) -> int:
        return self.max_samples

    def stop_reason(self, records: Sequence[RequestRecord]) -> tuple[Stop, str] | None:
        n = len(records)
        if any(not r.ok for r in records):
            return Stop.REQUEST_FAILED, "a request failed"
        if n not in self.schedule:
            return None
        self.looks += 1
        self.last_level = look_level(self.confidence, len(self.schedule))
        self.last_bounds = bounds(records, self.roof.round_ms, self.last_level,
                                  self.roof.max_accept)
        m = Measurement(backend="", records=list(records))
        status = judge(self.budget, m, self.roof, self.last_bounds).status
        if status in ("pass", "fail"):
            return Stop.DECIDED, (f"decided at look {self.looks} ({n} requests, level "
                                  f"{self.last_level:.4f})")
        if n >= self.max_samples:
            return Stop.SAMPLE_BUDGET, f"sample budget of {self.max_samples} requests"
        return None


def fill(text: str, values: dict[str, str]) -> str:
    for key, value in values.items():
        text = text.replace("{" + key + "}", value)
    return text


def needs_demo(budget: Budget) -> bool:
    texts = [budget.model.spec, budget.server.launch or ""]
    if budget.draft_model:
        texts.append(budget.draft_model.spec)
    return any("{demo_" in t for t in texts)


def resolve_model(ref: ModelRef, values: dict[str, str], base: Path, origin: str) -> Model:
    spec = fill(ref.spec, values)
    path = base / spec
    if not Path(spec).is_absolute() and path.exists():
        spec = str(path)
    return load_model(spec, ref.dtype, origin)


def roofline_for(budget: Budget, hw: Hardware, values: dict[str, str]) -> Roofline:
    base = budget.path.parent
    model = resolve_model(budget.model, values, base, f"{budget.path}: model")
    draft = (resolve_model(budget.draft_model, values, base, f"{budget.path}: speculative.draft_model")
             if budget.draft_model else None)
    return compute_roofline(hw, model, budget.speculation, draft, budget.context, budget.batch,
                            budget.overhead_ms)


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
        raise ConfigError(f"{budget.server_origin}: no server to measure: give a launch command or "
                          "a url (or pass --specbound-url / set SPECBOUND_URL)")
    return cfg


def measurement_identity(cfg: ServerConfig) -> str:
    """What the measurement lock is keyed on: the URL attached to, else the launch config."""
    if cfg.url:
        return cfg.url.rstrip("/").lower()
    return "launch " + cfg.key()


def worker_label() -> str:
    import os

    return f"pid {os.getpid()}" + (f", xdist {os.environ['PYTEST_XDIST_WORKER']}"
                                   if os.environ.get("PYTEST_XDIST_WORKER") else "")


def check_served_model(budget: Budget, info: dict[str, Any], roof: Roofline) -> None:
    """The budget's model must be what the server serves (the ids it reports)."""
    served = [str(m) for m in info.get("models") or [] if m] + (
        [str(info["model_path"])] if info.get("model_path") else [])
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
    partial: Callable[[dict[str, Any]], None] | None = None,
    say: Callable[[str], None] | None = None,
) -> tuple[dict[str, Any], Verdict]:
    """Measure one class and judge it; returns the JSON-ready result and the verdict."""
    values: dict[str, str] = {}
    if needs_demo(budget):
        from pytest_specbound.physics.demo import demo_models

        values.update(demo_models())
    roof = roofline_for(budget, hw, values)
    cfg = server_config(budget, settings, marker_server)
    server, backend = pool.get(cfg, values, name=budget.path.stem)
    m = Measurement(backend=backend.name)
    result = base_result(budget, cls, hw, roof)
    started = time.time()
    rule = SequentialRule(cls, roof, settings.confidence, settings.min_samples,
                          cls.samples or settings.samples)
    try:
        what = f"{budget.path.name}::{cls.name} ({worker_label()})"
        with exclusive_measurement(measurement_identity(cfg), what, say):
            m.info = backend.info(server.endpoint)
            if cfg.check_model:
                check_served_model(budget, m.info, roof)
            sampler = Sampler(server.endpoint, backend, cfg.model_id, roof.max_accept)

            def progress(cur: Measurement) -> None:
                if on_record:
                    on_record(cur)
                if partial:
                    partial(fill_result(result, cur, None, rule, started))

            measure(sampler, load_prompts(cls.prompts, f"{budget.path}: classes.{cls.name}.prompts"),
                    cls.max_tokens, rule, cls.warmup if cls.warmup is not None else settings.warmup,
                    settings.max_seconds, progress, m)
    except KeyboardInterrupt:
        if partial:
            partial(fill_result(result, m, None, rule, started, interrupted=True))
        raise
    if m.stop is Stop.TIME_BUDGET:  # stopped between looks: one more look at the same level
        rule.last_level = look_level(settings.confidence, len(rule.schedule))
        rule.last_bounds = bounds(m.records, roof.round_ms, rule.last_level, roof.max_accept)
    verdict = judge(cls, m, roof, rule.last_bounds)
    return fill_result(result, m, verdict, rule, started), verdict


def base_result(budget: Budget, cls: ClassBudget, hw: Hardware, roof: Roofline) -> dict[str, Any]:
    return {
        "budget": str(budget.path),
        "budget_sha256": budget.sha256,
        "class": cls.name,
        "hardware": hw.label,
        "accept_band": list(cls.accept) if cls.accept else None,
        "min_efficiency": cls.min_efficiency,
        "min_tok_s": cls.min_tok_s,
        "roofline": roof.to_dict(),
        "model": roof.model.name,
    }


def fill_result(result: dict[str, Any], m: Measurement, verdict: Verdict | None,
                rule: SequentialRule, started: float, interrupted: bool = False) -> dict[str, Any]:
    out = dict(result)
    data = m.to_dict()
    out.update({
        "accept_length": data["accept_length"],
        "accept_source": data["accept_source"],
        "decode_tok_s": data["decode_tok_s"],
        "server_decode_tok_s": data["server_decode_tok_s"],
        "ttft_ms": data["ttft_ms"],
        "samples": data["samples"],
        "stopped": data["stopped"],
        "clock_ratio": data["clock_ratio"],
        "clock_note": data["clock_note"],
        "server_timed": data["server_timed"],
        "server_clock_note": data["server_clock_note"],
        "untimed": data["untimed"],
        "untimed_note": data["untimed_note"],
        "server": data["server"],
        "bounds": rule.last_bounds,
        "confidence_level": rule.last_level or None,
        "requests": data["requests"],
        "elapsed_s": round(time.time() - started, 3),
        "partial": verdict is None,
        "interrupted": interrupted,
    })
    if verdict is not None:
        out.update(verdict.to_dict())
    else:
        out.update({"verdict": "error" if interrupted else "running",
                    "reasons": ["interrupted"] if interrupted else [], "roofline_tok_s": None,
                    "efficiency": None, "floor_tok_s": None})
    return out
