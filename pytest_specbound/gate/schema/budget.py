"""Budget TOML files -> frozen dataclasses; every error names file, line (where known) and key."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from pytest_specbound._toml import TomlTable, decode_text, loads_toml
from pytest_specbound.errors import ConfigError
from pytest_specbound.gate.schema.class_budget import LEVEL_TABLE, ClassBudget, parse_class
from pytest_specbound.gate.schema.class_budget import class_keys as class_keys
from pytest_specbound.gate.schema.disaggregated import Disaggregated, parse_disaggregated
from pytest_specbound.gate.schema.twin_table import NoSpeculation, parse_twin
from pytest_specbound.gate.schema.where import Where
from pytest_specbound.physics.layout import Layout
from pytest_specbound.physics.speculative import (
    HEAD_METHODS,
    METHODS,
    Speculation,
    parse_speculation,
)
from pytest_specbound.serving.backends import BACKENDS
from pytest_specbound.serving.connect import ServerConfig

TOP_KEYS = {"model", "speculative", "server", "classes", "hardware", "roofline", "no_speculation",
            "parallel", "telemetry", "disaggregated"}
MODEL_KEYS = {"name", "config", "gguf", "dtype", "served_name"}
SPEC_KEYS = {"method", "steps", "draft_tokens", "draft_model", "draft_dtype"}
SERVER_KEYS = {"backend", "launch", "url", "ready_timeout_s", "read_timeout_s", "api_key_env",
               "host", "port", "env", "cwd", "model_id", "check_model", "check_settings", "ca_bundle"}
ROOFLINE_KEYS = {"context", "overhead_ms", "draft_step_ms", "batch", "threads"}
PARALLEL_KEYS = {"tp", "pp", "ep", "dp_attention", "overlap", "nodes"}
TELEMETRY_KEYS = {"dcgm"}


@dataclass(frozen=True)
class ModelRef:
    spec: str  # catalog name, config.json path or .gguf path (placeholders filled in later)
    dtype: str | None = None
    served_name: str | None = None


@dataclass(frozen=True)
class HardwareOverride:
    """``[hardware.LABEL]``: the server and classes as they run on that hardware, parsed."""

    server: ServerConfig | None = None
    classes: Mapping[str, ClassBudget] = field(default_factory=dict)


@dataclass(frozen=True)
class Budget:
    path: Path
    model: ModelRef
    speculation: Speculation
    draft_model: ModelRef | None
    server: ServerConfig
    classes: dict[str, ClassBudget]
    hardware: Mapping[str, HardwareOverride] = field(default_factory=dict)
    context: int = 500
    overhead_ms: float | None = None  # None: the backend's figure (physics/overheads.py)
    draft_step_ms: float = 0.0  # the engine's own cost per draft forward, measured by the team
    head_dtype: str | None = None  # an MTP / EAGLE / DFlash head's dtype ([speculative] draft_dtype)
    batch: int = 1
    threads: int | None = None  # CPU: threads the server computes with (default: from its launch)
    sha256: str = ""
    no_speculation: NoSpeculation | None = None  # the twin, where the budget names one
    layout: Layout | None = None  # [parallel]: one instance's split over GPUs
    nodes: int | None = None  # [parallel] nodes: the GPUs spread over that many
    dcgm: tuple[str, ...] = ()  # [telemetry] dcgm: DCGM exporters' /metrics URLs, every node's
    disaggregated: Disaggregated | None = None  # prefill and decode apart: the decode side's URL
    # where each value was written (file:line: key, or the marker keyword), for errors at run
    # time: "server", "model", "draft_model", and compute_roofline's keys ("spec", "batch", ...)
    origins: Mapping[str, str] = field(default_factory=dict)

    def origin(self, key: str) -> str:
        return self.origins.get(key, f"{self.path}: {key}")

    @property
    def check_model(self) -> bool:
        return self.server.check_model

    def for_hardware(self, label: str) -> Budget:
        """Apply ``[hardware.LABEL]`` overrides of server and class fields."""
        over = self.hardware.get(label.lower())
        if over is None:
            return self
        return replace(self, server=over.server or self.server,
                       classes={**self.classes, **over.classes})


def _server_fields(values: TomlTable) -> TomlTable:
    out = {k: v for k, v in values.items() if k in {f.name for f in fields(ServerConfig)}}
    if "env" in out:
        out["env"] = tuple(sorted((str(k), str(v)) for k, v in out["env"].items()))
    return out


def load_budget(path: str | Path, display: str | None = None) -> Budget:
    """Parse and validate a budget file; errors name it as ``display`` (default: the path)."""
    p = Path(path)
    try:
        raw = p.read_bytes()
    except OSError as exc:
        raise ConfigError(f"{p}: cannot read: {exc.strerror or exc}") from None
    name = display or str(p)
    text = decode_text(raw, name)
    return parse_budget(loads_toml(text, name), p, text, hashlib.sha256(raw).hexdigest(), name)


def parse_budget(data: TomlTable, p: Path, text: str = "", sha256: str = "",
                 display: str | None = None, where: Where | None = None,
                 require_server: bool = True) -> Budget:
    """Validate budget tables (from a file, or from a marker's keywords through ``where``)."""
    w = where or Where(p, text, display)
    for key in data:
        if key not in TOP_KEYS:
            raise w.error(None, key, f"unknown table; valid: {', '.join(sorted(TOP_KEYS))}")
    model, model_key = _parse_model(w, w.table(data, "model"))
    speculation, draft, head_dtype = _parse_speculative(w, w.table(data, "speculative",
                                                                   required=False))
    server = _parse_server(w, "server", w.table(data, "server", required=require_server))
    roof_t = w.table(data, "roofline", required=False)
    w.check_keys("roofline", roof_t, ROOFLINE_KEYS)
    classes_t = w.table(data, "classes")
    if not classes_t:
        raise w.error(None, "classes", "needs at least one [classes.NAME] table")
    classes = {name: parse_class(w, name, values) for name, values in classes_t.items()}
    hardware = {label.lower(): _parse_override(w, label, over, server, classes)
                for label, over in w.table(data, "hardware", required=False).items()}
    twin = parse_twin(w, data)
    layout, nodes = _parse_parallel(w, w.table(data, "parallel", required=False))
    dcgm = _parse_telemetry(w, w.table(data, "telemetry", required=False))
    split = parse_disaggregated(w, w.table(data, "disaggregated", required=False))
    leveled = next((c for c in classes.values() if c.concurrency != (1,)), None)
    if "batch" in roof_t and leveled is not None:
        raise w.error("roofline", "batch", f"class '{leveled.name}' sets concurrency, which sets "
                      "the roofline's batch per level: remove [roofline] batch")
    return Budget(
        path=p, model=model, speculation=speculation, draft_model=draft, server=server,
        classes=classes, hardware=hardware,
        context=int(_default(w.number("roofline", roof_t, "context", integer=True, low=0), 500)),
        overhead_ms=w.number("roofline", roof_t, "overhead_ms", low=0),
        draft_step_ms=_default(w.number("roofline", roof_t, "draft_step_ms", low=0), 0.0),
        head_dtype=head_dtype,
        batch=int(_default(w.number("roofline", roof_t, "batch", integer=True, low=1), 1)),
        threads=_optional_int(w.number("roofline", roof_t, "threads", integer=True, low=1)),
        sha256=sha256, no_speculation=twin, layout=layout, nodes=nodes, dcgm=dcgm,
        disaggregated=split,
        origins={"server": w.name("server", ""), "model": w.name("model", model_key),
                 "draft_model": w.name("speculative", "draft_model"),
                 "spec": w.name("speculative", "method"),
                 "draft_dtype": w.name("speculative", "draft_dtype"),
                 **{k: w.name("roofline", k) for k in ROOFLINE_KEYS},
                 "layout": w.name("parallel", ""), "nodes": w.name("parallel", "nodes"),
                 **{f"classes.{n}.prompts": w.name(f"classes.{n}", "prompts") for n in classes}},
    )


def _parse_parallel(w: Where, t: TomlTable) -> tuple[Layout | None, int | None]:
    """``[parallel]``: tp, pp, ep (whole numbers), dp_attention and overlap (true / false), and
    the nodes the GPUs span. Without ``tp``, the GPUs over ``pp`` (filled in by the plan)."""
    if not t:
        return None, None
    w.check_keys("parallel", t, PARALLEL_KEYS)
    sizes = {k: w.number("parallel", t, k, integer=True, low=1) for k in ("tp", "pp", "ep")}
    flags = {}
    for key in ("dp_attention", "overlap"):
        if key in t and not isinstance(t[key], bool):
            raise w.error("parallel", key, f"must be true or false, got {t[key]!r}")
        flags[key] = bool(t.get(key, False))
    nodes = _optional_int(w.number("parallel", t, "nodes", integer=True, low=1))
    if not any(v is not None for v in sizes.values()) and not any(flags.values()):
        return None, nodes
    return Layout(tp=int(sizes["tp"] or 0), pp=int(sizes["pp"] or 1), ep=int(sizes["ep"] or 1),
                  **flags), nodes


def _parse_telemetry(w: Where, t: TomlTable) -> tuple[str, ...]:
    """``[telemetry] dcgm = ["http://node-a:9400/metrics", ...]``: DCGM exporters to scrape."""
    w.check_keys("telemetry", t, TELEMETRY_KEYS)
    urls = t.get("dcgm", [])
    if isinstance(urls, str):
        urls = [urls]
    if not isinstance(urls, list) or not all(
            isinstance(u, str) and u.startswith(("http://", "https://")) for u in urls):
        raise w.error("telemetry", "dcgm", "a list of DCGM exporter URLs, e.g. "
                      "[\"http://node-a:9400/metrics\"]")
    return tuple(urls)


def _parse_model(w: Where, model_t: TomlTable) -> tuple[ModelRef, str]:
    """``[model]``: the reference, and which key gave it (name, config or gguf)."""
    w.check_keys("model", model_t, MODEL_KEYS)
    given = [k for k in ("name", "config", "gguf") if k in model_t]
    if len(given) != 1:
        raise w.error("model", "", "give exactly one of name, config, gguf")
    model = ModelRef(w.string("model", model_t, given[0]) or "",
                     w.string("model", model_t, "dtype"), w.string("model", model_t, "served_name"))
    if model.dtype:
        from pytest_specbound.physics.dtypes import canonical_dtype

        canonical_dtype(model.dtype, w.name("model", "dtype"))  # names file:line: model.dtype
    return model, given[0]


def _parse_speculative(w: Where, spec_t: TomlTable
                       ) -> tuple[Speculation, ModelRef | None, str | None]:
    """``[speculative]``: the method, its draft model, and a drafting head's own dtype."""
    w.check_keys("speculative", spec_t, SPEC_KEYS)
    method = w.string("speculative", spec_t, "method") or "none"
    if method not in METHODS:
        raise w.error("speculative", "method", f"unknown method '{method}'; valid: "
                      f"{', '.join(METHODS)}")
    steps = w.number("speculative", spec_t, "steps", integer=True, low=1)
    tokens = w.number("speculative", spec_t, "draft_tokens", integer=True, low=1)
    try:
        speculation = parse_speculation(method, steps, tokens, origin="speculative.method")
    except ConfigError as exc:
        raise w.error("speculative", "draft_tokens", str(exc)) from None
    draft_spec = w.string("speculative", spec_t, "draft_model")
    draft_dtype = w.string("speculative", spec_t, "draft_dtype")
    draft = ModelRef(draft_spec, draft_dtype) if draft_spec else None
    head_dtype = None
    if draft is None and draft_dtype is not None:  # a head's own dtype (an NVFP4 EAGLE head)
        if method not in HEAD_METHODS:
            raise w.error("speculative", "draft_dtype", "needs a draft_model or a drafting "
                          f"head to apply to ({', '.join(HEAD_METHODS)})")
        from pytest_specbound.physics.dtypes import canonical_dtype

        head_dtype = canonical_dtype(draft_dtype, w.name("speculative", "draft_dtype"))
    if method == "draft" and draft is None:
        raise w.error("speculative", "draft_model", "method 'draft' needs a draft_model")
    return speculation, draft, head_dtype


def _parse_override(w: Where, label: str, over: Any, server: ServerConfig,
                    classes: Mapping[str, ClassBudget]) -> HardwareOverride:
    """``[hardware.LABEL]``: its server and class keys applied to the budget's own."""
    table = f"hardware.{label}"
    if not isinstance(over, dict):
        raise w.error(None, label, "must be a table")
    w.check_keys(table, over, {"server", "classes"})
    on_hw = replace(server, **_server_values(w, f"{table}.server", over["server"])) \
        if "server" in over else None
    parsed = {}
    for name, values in (over.get("classes") or {}).items():
        if name not in classes:
            raise w.error(f"{table}.classes", name,
                          f"unknown class; the budget has {', '.join(classes)}")
        base = classes[name]
        checked = parse_class(w, f"{table}.classes.{name}", {
            "prompts": base.prompts, "concurrency": list(base.concurrency), **values}, label=name)
        given = {k: checked.value_of(k) for k in values if not LEVEL_TABLE.match(k)}
        on_class = base.with_values(given)
        parsed[name] = replace(on_class, levels=checked.levels) \
            if any(LEVEL_TABLE.match(k) for k in values) else on_class
    return HardwareOverride(on_hw, parsed)


def _optional_int(value: Any) -> int | None:
    return None if value is None else int(value)


def _default(value: Any, default: float) -> float:
    return float(default if value is None else value)


def _parse_server(w: Where, table: str, t: Any) -> ServerConfig:
    return ServerConfig(**_server_values(w, table, t))


def _server_values(w: Where, table: str, t: Any) -> TomlTable:
    """The validated ``[server]`` keys that were given, as ServerConfig fields."""
    if not isinstance(t, dict):
        raise w.error(None, table, "must be a table")
    w.check_keys(table, t, SERVER_KEYS)
    backend = w.string(table, t, "backend") or "auto"
    if backend not in BACKENDS:
        raise w.error(table, "backend", f"unknown backend '{backend}'; valid: {', '.join(BACKENDS)}")
    if "launch" in t and "url" in t:
        raise w.error(table, "url", "give launch or url, not both")
    for key in ("launch", "url", "api_key_env", "host", "cwd", "model_id", "ca_bundle"):
        w.string(table, t, key)
    if "url" in t:
        from pytest_specbound.serving.urls import split_url

        split_url(t["url"], w.name(table, "url"))
    w.number(table, t, "ready_timeout_s", low=1)
    w.number(table, t, "read_timeout_s", low=0.1)
    w.number(table, t, "port", integer=True, low=1, high=65535)
    if "env" in t and not isinstance(t["env"], dict):
        raise w.error(table, "env", "must be a table of strings")
    for key in ("check_model", "check_settings"):
        if key in t and not isinstance(t[key], bool):
            raise w.error(table, key, "must be true or false")
    values = _server_fields(t)
    if "ca_bundle" in values and not Path(values["ca_bundle"]).is_absolute():
        values["ca_bundle"] = str(w.path.parent / values["ca_bundle"])
    if "url" in values:
        values["origin"] = w.name(table, "url")
    return values


