"""Budget TOML files -> frozen dataclasses; every error names file, line (where known) and key."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from pytest_specbound._toml import TomlTable, decode_text, loads_toml
from pytest_specbound.errors import ConfigError
from pytest_specbound.gate.twin_table import NoSpeculation, parse_twin
from pytest_specbound.gate.where import Where
from pytest_specbound.measure.hub_sets import is_hub
from pytest_specbound.measure.lengths import LengthsProblem, OutputLengths
from pytest_specbound.measure.prompts import BUILTIN, default_max_tokens
from pytest_specbound.physics.speculative import (
    HEAD_METHODS,
    METHODS,
    Speculation,
    parse_speculation,
)
from pytest_specbound.serving.backends import BACKENDS
from pytest_specbound.serving.backends.base import SAMPLING_KEYS, Sampling
from pytest_specbound.serving.connect import ServerConfig
from pytest_specbound.values import ValueProblem, levels

TOP_KEYS = {"model", "speculative", "server", "classes", "hardware", "roofline", "no_speculation"}
MODEL_KEYS = {"name", "config", "gguf", "dtype", "served_name"}
SPEC_KEYS = {"method", "steps", "draft_tokens", "draft_model", "draft_dtype"}
SERVER_KEYS = {"backend", "launch", "url", "ready_timeout_s", "read_timeout_s", "api_key_env",
               "host", "port", "env", "cwd", "model_id", "check_model", "check_settings", "ca_bundle"}
ROOFLINE_KEYS = {"context", "overhead_ms", "draft_step_ms", "batch", "threads"}
CLASS_KEYS = {"prompts", "max_tokens", "accept", "min_efficiency", "min_tok_s", "max_ttft_ms",
              "samples", "warmup", "concurrency", "require_no_throttle", "resolution",
              "min_speedup", "max_tpot_ms", "tpot_percentile", "min_goodput", "category",
              *SAMPLING_KEYS}
LEVEL_KEYS = {"accept", "min_efficiency", "min_tok_s", "max_ttft_ms", "samples", "warmup",
              "resolution", "min_speedup", "max_tpot_ms", "tpot_percentile", "min_goodput",
              *SAMPLING_KEYS}
LEVEL_TABLE = re.compile(r"^c([1-9][0-9]*)$")  # [classes.NAME.c4]: thresholds at concurrency 4


@dataclass(frozen=True)
class ClassBudget:
    """Thresholds for one prompt class."""

    name: str
    prompts: str
    max_tokens: int  # the output length (a distribution's mean where one is given)
    accept: tuple[float, float] | None = None
    min_efficiency: float | None = None
    min_tok_s: float | None = None
    max_ttft_ms: float | None = None
    samples: int | None = None
    warmup: int | None = None
    concurrency: tuple[int, ...] = (1,)  # closed-loop levels: one test item each
    levels: Mapping[int, Mapping[str, Any]] = field(default_factory=dict)  # [classes.X.cN]
    require_no_throttle: bool = False  # a throttled GPU fails the class on its own
    resolution: float | None = None  # relative miss the verdict must catch (default: settings)
    min_speedup: float | None = None  # decode with speculation over without, per user
    category: tuple[str, ...] = ()  # within a prompt file: the categories measured (all: empty)
    max_tpot_ms: float | None = None  # time per output token: at most this ...
    tpot_percentile: float = 99.0  # ... for this percentile of requests
    min_goodput: float | None = None  # the share of requests meeting every SLO set
    temperature: float = 0.0  # how tokens are chosen (greedy by default), as deployed
    top_p: float | None = None
    top_k: int | None = None
    min_p: float | None = None
    seed: int | None = None
    output_lengths: OutputLengths | None = None  # max_tokens as a distribution

    @property
    def sampling(self) -> Sampling:
        return Sampling(self.temperature, self.top_p, self.top_k, self.min_p, self.seed)

    @property
    def level_ids(self) -> bool:
        """Whether item ids name the level (any class that declares levels besides 1 alone)."""
        return self.concurrency != (1,)

    def at(self, level: int) -> ClassBudget:
        """The class as judged at concurrency ``level``: its ``[classes.NAME.cLEVEL]`` values
        over the class's own."""
        return replace(self, **dict(self.levels.get(level, {})))


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


def _class_fields(values: TomlTable) -> TomlTable:
    """Validated class keys as ClassBudget fields (level tables gathered into ``levels``)."""
    out = {k: v for k, v in values.items() if not LEVEL_TABLE.match(k)}
    levels = {int(k[1:]): _class_fields(v) for k, v in values.items() if LEVEL_TABLE.match(k)}
    if "accept" in out:
        out["accept"] = tuple(out["accept"])
    if "concurrency" in out:
        c = out["concurrency"]
        out["concurrency"] = tuple(c) if isinstance(c, list) else (int(c),)
    if levels:
        out["levels"] = levels
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
    classes = {name: _parse_class(w, name, values) for name, values in classes_t.items()}
    hardware = {label.lower(): _parse_override(w, label, over, server, classes)
                for label, over in w.table(data, "hardware", required=False).items()}
    twin = parse_twin(w, data)
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
        sha256=sha256, no_speculation=twin,
        origins={"server": w.name("server", ""), "model": w.name("model", model_key),
                 "draft_model": w.name("speculative", "draft_model"),
                 "spec": w.name("speculative", "method"),
                 "draft_dtype": w.name("speculative", "draft_dtype"),
                 **{k: w.name("roofline", k) for k in ROOFLINE_KEYS},
                 **{f"classes.{n}.prompts": w.name(f"classes.{n}", "prompts") for n in classes}},
    )


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
        checked = _parse_class(w, f"{table}.classes.{name}", {
            "prompts": base.prompts, "concurrency": list(base.concurrency), **values}, label=name)
        fields_given = _class_fields(values)  # the level tables gathered; values as parsed
        parsed[name] = replace(base, **{k: v if k == "levels" else getattr(checked, k)
                                        for k, v in fields_given.items()})
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


def _parse_class(w: Where, table_name: str, t: Any, label: str | None = None) -> ClassBudget:
    table = table_name if "." in table_name else f"classes.{table_name}"
    name = label or table_name
    if not isinstance(t, dict):
        raise w.error(None, name, "must be a table")
    level_tables = {k: v for k, v in t.items() if LEVEL_TABLE.match(k) and isinstance(v, dict)}
    w.check_keys(table, {k: v for k, v in t.items() if k not in level_tables}, CLASS_KEYS,
                 "; and [cN] tables of thresholds at concurrency N")
    concurrency = _concurrency(w, table, t.get("concurrency", 1))
    levels: dict[int, Mapping[str, Any]] = {}
    for key, values in level_tables.items():
        level = int(key[1:])
        if level not in concurrency:
            raise w.error(table, key, f"concurrency {level} is not one of the class's levels "
                          f"{list(concurrency)}")
        w.check_keys(f"{table}.{key}", values, LEVEL_KEYS)
        checked = _parse_class(w, f"{table}.{key}", {"prompts": t.get("prompts", name), **values},
                               label=name)
        levels[level] = {k: getattr(checked, k) for k in values}
    prompts = w.string(table, t, "prompts") or name
    if prompts not in BUILTIN and not prompts.endswith((".jsonl", ".json")) \
            and not is_hub(prompts):
        raise w.error(table, "prompts", f"unknown prompt set '{prompts}'; valid: "
                      f"{', '.join(BUILTIN)}, a .jsonl / .json file (plain prompts, "
                      "MT-bench questions, ShareGPT conversations) or hf:DATASET[:CONFIG][@SPLIT]")
    if prompts.endswith((".jsonl", ".json")) and not is_hub(prompts):
        resolved = (w.path.parent / prompts)
        if not resolved.is_file():
            raise w.error(table, "prompts", f"no such file: {resolved}")
        prompts = str(resolved)
    category = t.get("category")
    if category is not None and (not (isinstance(category, str) and category) and not (
            isinstance(category, list) and category and all(isinstance(c, str) for c in category))):
        raise w.error(table, "category", f"a category or a list of them, got {category!r}")
    if category is not None and prompts in BUILTIN:
        raise w.error(table, "category", "selects within a prompt file: set prompts = \"PATH\"")
    accept = t.get("accept")
    band: tuple[float, float] | None = None
    if accept is not None:
        if (not isinstance(accept, list) or len(accept) != 2
                or not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in accept)):
            raise w.error(table, "accept", f"must be [low, high], got {accept!r}")
        if accept[0] > accept[1]:
            raise w.error(table, "accept", f"reversed band [{accept[0]}, {accept[1]}]: low > high")
        if accept[0] < 1:
            raise w.error(table, "accept", "accept length counts the bonus token: low must be >= 1")
        band = (float(accept[0]), float(accept[1]))
    return ClassBudget(
        name=name,
        prompts=prompts,
        **_max_tokens(w, table, t, prompts),
        accept=band,
        min_efficiency=w.number(table, t, "min_efficiency", low=0, high=1),
        min_tok_s=w.number(table, t, "min_tok_s", low=0),
        max_ttft_ms=w.number(table, t, "max_ttft_ms", low=0),
        samples=w.number(table, t, "samples", integer=True, low=1),
        warmup=w.number(table, t, "warmup", integer=True, low=0),
        concurrency=concurrency,
        levels=levels,
        require_no_throttle=_flag(w, table, t, "require_no_throttle"),
        resolution=w.number(table, t, "resolution", low=0.005, high=0.5),
        min_speedup=w.number(table, t, "min_speedup", low=0),
        category=(category,) if isinstance(category, str) else tuple(category or ()),
        **_slos(w, table, t),
        **_sampling(w, table, t),
    )


def _max_tokens(w: Where, table: str, t: TomlTable, prompts: str) -> TomlTable:
    """``max_tokens = 256``, or a distribution table ``{mean = 256, stdev = 96}`` (each request
    its own draw; the mean stands for the class where one number is needed)."""
    value = t.get("max_tokens")
    if isinstance(value, dict):
        try:
            lengths = OutputLengths.from_table(value)
        except LengthsProblem as exc:
            raise w.error(table, "max_tokens", f"{exc}; e.g. {{mean = 256, stdev = 96, "
                          f"min = 16, max = 1024}} or {{distribution = \"uniform\", min = 64, "
                          f"max = 512}}") from None
        return {"max_tokens": lengths.typical, "output_lengths": lengths}
    return {"max_tokens": w.number(table, t, "max_tokens", integer=True, low=1)
            or default_max_tokens(prompts)}


def _slos(w: Where, table: str, t: TomlTable) -> TomlTable:
    """``max_tpot_ms`` (at ``tpot_percentile``, default 99) and ``min_goodput``."""
    values = {"max_tpot_ms": w.number(table, t, "max_tpot_ms", low=0),
              "tpot_percentile": w.number(table, t, "tpot_percentile", low=50, high=100),
              "min_goodput": w.number(table, t, "min_goodput", low=0, high=1)}
    if "min_goodput" in t and "max_ttft_ms" not in t and "max_tpot_ms" not in t \
            and "." not in table.removeprefix("classes."):
        raise w.error(table, "min_goodput", "the share of requests meeting every SLO needs an "
                      "SLO: set max_ttft_ms or max_tpot_ms")
    return {k: v for k, v in values.items() if v is not None}


def _sampling(w: Where, table: str, t: TomlTable) -> TomlTable:
    """The class's sampling keys, checked (those not given keep their defaults)."""
    values = {"temperature": w.number(table, t, "temperature", low=0, high=5),
              "top_p": w.number(table, t, "top_p", low=0, high=1),
              "top_k": w.number(table, t, "top_k", integer=True, low=1),
              "min_p": w.number(table, t, "min_p", low=0, high=1),
              "seed": w.number(table, t, "seed", integer=True, low=0)}
    return {k: v for k, v in values.items() if v is not None}


def _flag(w: Where, table: str, t: TomlTable, key: str) -> bool:
    if key in t and not isinstance(t[key], bool):
        raise w.error(table, key, f"must be true or false, got {t[key]!r}")
    return bool(t.get(key, False))


def _concurrency(w: Where, table: str, value: Any) -> tuple[int, ...]:
    """``concurrency = 4`` or ``[1, 4, 16]``."""
    try:
        return levels(value if isinstance(value, list) else [value])
    except ValueProblem as exc:
        raise w.error(table, "concurrency", f"{exc}: a whole number or a list of them, e.g. "
                      f"[1, 4, 16]; got {value!r}") from None
