"""The result of one class measurement, typed, and its one JSON form (results schema 1).

Everything that reports a class (results JSON, JUnit properties, the benchmark JSON, the terminal
and markdown tables, the plot, ``specbound calibrate``) reads a :class:`ClassResult`; only
:meth:`ClassResult.to_json` / :meth:`ClassResult.from_json` know the JSON keys.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, cast

from pytest_specbound.gate.verdicts.thresholds import SPECS
from pytest_specbound.gate.verdicts.verdict import REASONS, STATUSES, Diagnosis, Reason, Status, Verdict
from pytest_specbound.measure.measurement import Measurement, Ttft
from pytest_specbound.physics.roofline import Roofline
from pytest_specbound.serving.records import (
    ACCEPT_SOURCES,
    AcceptSource,
    JSONObject,
    RequestRecord,
    ServerInfo,
)

Bounds = Mapping[str, tuple[float, float]]  # metric -> confidence interval at the last look
DIAGNOSES: tuple[Diagnosis, ...] = ("drafter", "system", "both", "speculation", "none")


@dataclass(frozen=True)
class RooflineFigures:
    """The roofline as a result carries it (what :meth:`Roofline.to_dict` gives)."""

    round_ms: float
    components_ms: Mapping[str, float]
    ceiling_tok_s: float
    max_accept: int
    bound: str
    speculative: str
    context: int
    batch: int
    accept: float | None = None
    expected_tok_s: float | None = None
    hardware: JSONObject = field(default_factory=dict)
    model: JSONObject = field(default_factory=dict)
    draft_model: JSONObject | None = None
    draft_forwards: int = 0
    draft_step_ms: float = 0.0
    head_dtype: str | None = None
    overhead_source: str = ""
    layout: JSONObject | None = None  # the split over GPUs and nodes, where one was modelled
    notes: tuple[str, ...] = ()  # what the layout's parts assumed

    @property
    def prefill_ms(self) -> float:
        """Other requests' prefill per round, measured at a closed-loop level (0: none)."""
        return self.components_ms.get("prefill", 0.0)

    @property
    def physics(self) -> dict[str, float]:
        """The components the model and hardware give, without the measured prefill (the same
        for every class of a budget at one level)."""
        return {k: v for k, v in self.components_ms.items() if k != "prefill"}

    @property
    def physics_round_ms(self) -> float:
        return self.round_ms - self.prefill_ms

    @classmethod
    def of(cls, roof: Roofline) -> RooflineFigures:
        """The figures of ``roof`` at its full accept length (rounded as ``to_dict`` rounds)."""
        from pytest_specbound.physics.roofline import draft_forwards

        accept = roof.max_accept
        return cls(
            round_ms=round(roof.round_ms, 4),
            components_ms={k: round(v, 4) for k, v in roof.components_ms.items()},
            ceiling_tok_s=round(roof.ceiling_tok_s, 3), max_accept=roof.max_accept,
            bound=roof.bound, speculative=roof.spec.label, context=roof.context,
            batch=roof.batch, accept=accept, expected_tok_s=round(roof.tok_s(accept), 3),
            hardware=roof.hardware.describe(), model=roof.model.describe(),
            draft_model=roof.draft_model.describe() if roof.draft_model else None,
            draft_forwards=draft_forwards(roof.spec), draft_step_ms=roof.draft_step_ms,
            head_dtype=roof.head_dtype, overhead_source=roof.overhead_source,
            layout=cast(JSONObject, roof.to_dict().get("layout")) if roof.layout else None,
            notes=roof.notes)

    @classmethod
    def from_json(cls, d: Mapping[str, object]) -> RooflineFigures:
        comps = d.get("components_ms")
        draft = d.get("draft_model")
        return cls(
            round_ms=_float(d, "round_ms") or 0.0,
            components_ms={str(k): float(cast(float, v)) for k, v in comps.items()}
            if isinstance(comps, Mapping) else {},
            ceiling_tok_s=_float(d, "ceiling_tok_s") or 0.0,
            max_accept=int(cast(int, d.get("max_accept") or 1)),
            bound=str(d.get("bound") or ""), speculative=str(d.get("speculative") or ""),
            context=int(cast(int, d.get("context") or 0)), batch=int(cast(int, d.get("batch") or 1)),
            accept=_float(d, "accept"), expected_tok_s=_float(d, "expected_tok_s"),
            hardware=_object(d, "hardware"), model=_object(d, "model"),
            draft_model=draft if isinstance(draft, Mapping) else None,
            draft_forwards=int(cast(int, d.get("draft_forwards") or 0)),
            draft_step_ms=_float(d, "draft_step_ms") or 0.0,
            head_dtype=str(d["head_dtype"]) if d.get("head_dtype") else None,
            overhead_source=str(d.get("overhead_source") or ""),
            layout=_object(d, "layout") or None,
            notes=tuple(str(n) for n in _list(d, "notes")),
        )

    def to_json(self) -> dict[str, object]:
        return {"round_ms": self.round_ms, "components_ms": dict(self.components_ms),
                "ceiling_tok_s": self.ceiling_tok_s, "accept": self.accept,
                "max_accept": self.max_accept, "expected_tok_s": self.expected_tok_s,
                "bound": self.bound, "speculative": self.speculative, "context": self.context,
                "batch": self.batch, "hardware": dict(self.hardware), "model": dict(self.model),
                "draft_model": dict(self.draft_model) if self.draft_model is not None else None,
                "draft_forwards": self.draft_forwards, "draft_step_ms": self.draft_step_ms,
                "head_dtype": self.head_dtype, "overhead_source": self.overhead_source,
                **({"layout": dict(self.layout), "notes": list(self.notes)}
                   if self.layout else {})}


@dataclass(frozen=True)
class ClassResult:
    """One prompt class of one budget on one hardware: what was asked, measured and decided."""

    budget: str
    class_name: str
    hardware: str
    verdict: Verdict
    budget_sha256: str | None = None
    model: str | None = None
    limits: Mapping[str, Any] = field(default_factory=dict)  # its thresholds (gate/verdicts/thresholds.py)
    roofline: RooflineFigures | None = None
    accept_length: float | None = None
    accept_source: AcceptSource = "none"
    decode_tok_s: float | None = None
    server_decode_tok_s: float | None = None
    ttft_ms: Ttft = field(default_factory=Ttft)
    samples: int = 0
    stopped: str = ""
    clock_ratio: float | None = None
    clock_note: str | None = None
    server_timed: int = 0
    server_clock_note: str | None = None
    untimed: int = 0
    untimed_note: str | None = None
    server: ServerInfo = field(default_factory=ServerInfo)
    bounds: Bounds | None = None
    confidence_level: float | None = None
    requests: Sequence[RequestRecord] = ()
    elapsed_s: float | None = None
    partial: bool = False
    interrupted: bool = False
    nodeid: str | None = None
    concurrency: int = 1  # closed-loop streams (the roofline's batch when the class has levels)
    level_ids: bool = False  # the class declares levels: its label names the level
    aggregate_tok_s: float | None = None  # decode tokens over wall time, all streams together
    in_flight: float | None = None  # requests in flight while a request decoded (time-weighted)
    co_decoding: float | None = None  # sequences decoding at once, likewise
    drained: Sequence[RequestRecord] = ()  # finished after the rule stopped (not counted)
    served: JSONObject = field(default_factory=dict)  # the server's settings and their sources
    telemetry: JSONObject | None = None  # GPU telemetry summary while the class ran
    transient: int = 0  # leading requests left out of the figures as a warm-up transient
    resolution: float | None = None  # the relative miss each threshold's test is sized for
    tests: JSONObject = field(default_factory=dict)  # per threshold: its sequential test's state
    speedup: float | None = None  # per-user decode with speculation over without (this level)
    speedup_bounds: tuple[float, float] | None = None  # at confidence_level
    base: JSONObject | None = None  # the class measured without speculation (Sample.to_json)
    draft_step_ms: JSONObject | None = None  # the engine's cost per draft forward, measured
    command: str | None = None  # the server measured: its launch command (filled), or its URL
    backend: str | None = None  # the server family measured (sglang, vllm, llamacpp, ...)
    sampling: JSONObject = field(default_factory=dict)  # what each request asked (temperature...)
    output_lengths: JSONObject = field(default_factory=dict)  # max_tokens, or its distribution
    tpot_ms: Ttft = field(default_factory=Ttft)  # time per output token: median, p90, p99
    goodput: float | None = None  # the share of requests meeting every SLO the class sets
    tpot_percentile: float | None = None
    baseline: JSONObject | None = None  # the comparison with the last accepted run
    pin_accept: float | None = None  # the accept length the engine was pinned at
    workload: Mapping[str, Any] | None = None  # how the prompt set was read (PromptSet)
    disaggregated: Mapping[str, Any] | None = None  # prefill and decode apart: each side
    # comparisons beyond the twin's and the baseline's, by reference name (a reference added
    # to the run's table writes its part here; the JSON's "compared", left out when empty)
    compared: Mapping[str, JSONObject] = field(default_factory=dict)

    def __getitem__(self, key: str) -> object:
        """The results-JSON view: ``result["decode_tok_s"]`` reads what the results file says
        (for tests written against the JSON keys; attributes are the typed way)."""
        data = self.to_json()
        if key not in data:
            raise KeyError(f"{key!r} is not a results key; valid: {', '.join(data)}")
        return data[key]

    @property
    def accept_band(self) -> tuple[float, float] | None:
        band = self.limits.get("accept")
        return (float(band[0]), float(band[1])) if band is not None else None

    def limit(self, key: str) -> float | None:
        """A threshold's value (by its budget key), None where not set."""
        value = self.limits.get(key)
        return float(value) if isinstance(value, (int, float)) else None

    @property
    def base_decode_tok_s(self) -> float | None:
        """The per-user decode rate without speculation (the base's geometric mean)."""
        value = (self.base or {}).get("decode_tok_s")
        return float(value) if isinstance(value, (int, float)) else None

    @property
    def status(self) -> Status:
        return self.verdict.status

    @property
    def label(self) -> str:
        """``budget.toml::class[hardware]``, as the summary names a result."""
        return f"{basename(self.budget)}::{self.class_name}[{self.level_label}]"

    @property
    def level_label(self) -> str:
        """``HARDWARE`` or ``HARDWARE-cN``: the id inside the brackets of the test item."""
        return f"{self.hardware}-c{self.concurrency}" if self.level_ids else self.hardware

    @property
    def answered(self) -> int:
        """Requests the level's window sent and saw end: counted (failed ones and the warm-up
        transient among them), untimed and retried, drained after the stop."""
        return self.samples + self.untimed + len(self.drained)

    @property
    def timed(self) -> list[RequestRecord]:
        """The counted requests that succeeded and were timed, after the warm-up transient
        (what :attr:`Measurement.timed` gives of the measurement this result holds)."""
        return [q for q in list(self.requests)[self.transient:] if q.ok and q.decode_s > 0]

    def with_measurement(self, m: Measurement) -> ClassResult:
        """This result with ``m``'s figures (a running result shows the requests so far)."""
        return replace(
            self, accept_length=m.accept_length, accept_source=m.accept_source,
            decode_tok_s=m.decode_tok_s, server_decode_tok_s=m.server_decode_tok_s,
            ttft_ms=m.ttft_ms(), samples=len(m.records), stopped=m.stopped,
            clock_ratio=m.clock_ratio, clock_note=m.clock_note(), server_timed=m.server_timed,
            server_clock_note=m.server_clock_note(), untimed=len(m.untimed),
            untimed_note=m.untimed_note(), server=m.info, requests=tuple(m.records),
            concurrency=m.concurrency, aggregate_tok_s=m.aggregate_tok_s, in_flight=m.in_flight,
            co_decoding=m.co_decoding, drained=tuple(m.drained), transient=m.transient,
            backend=m.backend or None)

    # -- the one JSON form ---------------------------------------------------------------
    def to_json(self) -> dict[str, object]:
        v = self.verdict
        return {
            "budget": self.budget, "budget_sha256": self.budget_sha256, "class": self.class_name,
            "hardware": self.hardware,
            **{s.field: s.to_json(self.limits.get(s.key)) for s in SPECS},
            "roofline": self.roofline.to_json() if self.roofline else None, "model": self.model,
            "accept_length": self.accept_length, "accept_source": self.accept_source,
            "decode_tok_s": self.decode_tok_s, "server_decode_tok_s": self.server_decode_tok_s,
            "ttft_ms": {"median": self.ttft_ms.median, "p90": self.ttft_ms.p90,
                        "p99": self.ttft_ms.p99},
            "concurrency": self.concurrency, "level_ids": self.level_ids,
            "aggregate_tok_s": self.aggregate_tok_s, "in_flight": self.in_flight,
            "co_decoding": self.co_decoding,
            "served": dict(self.served), "telemetry": self.telemetry,
            "samples": self.samples, "stopped": self.stopped, "clock_ratio": self.clock_ratio,
            "clock_note": self.clock_note, "server_timed": self.server_timed,
            "server_clock_note": self.server_clock_note, "untimed": self.untimed,
            "untimed_note": self.untimed_note, "server": self.server.to_json(),
            "bounds": {k: list(b) for k, b in self.bounds.items()} if self.bounds else None,
            "confidence_level": self.confidence_level, "resolution": self.resolution,
            "transient": self.transient, "tests": dict(self.tests),
            "requests": [r.to_json() for r in self.requests],
            "drained_requests": [r.to_json() for r in self.drained], "elapsed_s": self.elapsed_s,
            "partial": self.partial, "interrupted": self.interrupted,
            "verdict": v.status, "reasons": list(v.reasons), "diagnosis": v.diagnosis,
            "text": list(v.lines), "roofline_tok_s": v.roofline_tok_s,
            "floor_tok_s": v.floor_tok_s, "efficiency": v.efficiency,
            "measured_round_ms": v.round_ms, "nodeid": self.nodeid,
            "speedup": self.speedup,
            "speedup_bounds": list(self.speedup_bounds) if self.speedup_bounds else None,
            "base_decode_tok_s": self.base_decode_tok_s, "base": self.base,
            "draft_step_ms": self.draft_step_ms, "command": self.command,
            "backend": self.backend, "sampling": dict(self.sampling),
            "output_lengths": dict(self.output_lengths),
            "tpot_ms": {"median": self.tpot_ms.median, "p90": self.tpot_ms.p90,
                        "p99": self.tpot_ms.p99},
            "goodput": self.goodput, "tpot_percentile": self.tpot_percentile,
            "baseline": self.baseline, "pin_accept": self.pin_accept,
            "workload": dict(self.workload) if self.workload else None,
            "disaggregated": dict(self.disaggregated) if self.disaggregated else None,
            **({"compared": {k: dict(v) for k, v in self.compared.items()}}
               if self.compared else {}),
        }

    @classmethod
    def from_json(cls, d: Mapping[str, object]) -> ClassResult:
        """A result read back (from a worker, or a results file); raises ValueError if malformed."""
        try:
            return cls._from_json(d)
        except (KeyError, IndexError, TypeError, ValueError, AttributeError) as exc:
            raise ValueError(f"not a class result ({type(exc).__name__}: {exc})") from None

    @classmethod
    def _from_json(cls, d: Mapping[str, object]) -> ClassResult:
        status = str(d.get("verdict") or "error")
        diagnosis = str(d.get("diagnosis") or "none")
        verdict = Verdict(
            status if status in STATUSES else "error",
            [str(x) for x in _list(d, "text")],
            # the built-in codes, and a declared threshold's own (a word of letters and _)
            [cast(Reason, str(x)) for x in _list(d, "reasons")
             if str(x) in REASONS or re.fullmatch(r"[a-z][a-z0-9_]*", str(x))],
            diagnosis if diagnosis in DIAGNOSES else "none",
            _float(d, "roofline_tok_s"), _float(d, "floor_tok_s"), _float(d, "efficiency"),
            _float(d, "measured_round_ms"))
        limits = {s.key: s.from_json(d.get(s.field)) for s in SPECS}
        roof = d.get("roofline")
        ttft = _object(d, "ttft_ms")
        raw_bounds = d.get("bounds")
        source = str(d.get("accept_source") or "none")
        return cls(
            budget=str(d["budget"]), class_name=str(d["class"]), hardware=str(d["hardware"]),
            verdict=verdict, budget_sha256=_str(d, "budget_sha256"), model=_str(d, "model"),
            limits={k: v for k, v in limits.items() if v is not None},
            roofline=RooflineFigures.from_json(roof) if isinstance(roof, Mapping) else None,
            accept_length=_float(d, "accept_length"),
            accept_source=source if source in ACCEPT_SOURCES else "none",
            decode_tok_s=_float(d, "decode_tok_s"),
            server_decode_tok_s=_float(d, "server_decode_tok_s"),
            ttft_ms=Ttft(_float(ttft, "median"), _float(ttft, "p90"), _float(ttft, "p99")),
            concurrency=int(cast(int, d.get("concurrency") or 1)),
            level_ids=bool(d.get("level_ids")), aggregate_tok_s=_float(d, "aggregate_tok_s"),
            in_flight=_float(d, "in_flight"), co_decoding=_float(d, "co_decoding"),
            served=dict(_object(d, "served")),
            telemetry=_object(d, "telemetry") or None,
            drained=tuple(RequestRecord.from_json(r) for r in _list(d, "drained_requests")
                          if isinstance(r, Mapping)),
            samples=int(cast(int, d.get("samples") or 0)), stopped=str(d.get("stopped") or ""),
            clock_ratio=_float(d, "clock_ratio"), clock_note=_str(d, "clock_note"),
            server_timed=int(cast(int, d.get("server_timed") or 0)),
            server_clock_note=_str(d, "server_clock_note"),
            untimed=int(cast(int, d.get("untimed") or 0)), untimed_note=_str(d, "untimed_note"),
            server=ServerInfo.from_json(_object(d, "server")),
            bounds={str(k): (float(v[0]), float(v[1])) for k, v in raw_bounds.items()}
            if isinstance(raw_bounds, Mapping) else None,
            confidence_level=_float(d, "confidence_level"), resolution=_float(d, "resolution"),
            transient=int(cast(int, d.get("transient") or 0)), tests=dict(_object(d, "tests")),
            requests=tuple(RequestRecord.from_json(r) for r in _list(d, "requests")
                           if isinstance(r, Mapping)),
            elapsed_s=_float(d, "elapsed_s"), partial=bool(d.get("partial")),
            interrupted=bool(d.get("interrupted")), nodeid=_str(d, "nodeid"),
            speedup=_float(d, "speedup"),
            speedup_bounds=_pair(d, "speedup_bounds"), base=_object(d, "base") or None,
            draft_step_ms=_object(d, "draft_step_ms") or None, command=_str(d, "command"),
            backend=_str(d, "backend"), sampling=dict(_object(d, "sampling")),
            output_lengths=dict(_object(d, "output_lengths")),
            tpot_ms=Ttft(*(_float(_object(d, "tpot_ms"), k) for k in ("median", "p90", "p99"))),
            goodput=_float(d, "goodput"), tpot_percentile=_float(d, "tpot_percentile"),
            baseline=_object(d, "baseline") or None, pin_accept=_float(d, "pin_accept"),
            workload=_object(d, "workload") or None,
            disaggregated=_object(d, "disaggregated") or None,
            compared={str(k): dict(v) for k, v in _object(d, "compared").items()
                      if isinstance(v, Mapping)},
        )


def _pair(d: Mapping[str, object], key: str) -> tuple[float, float] | None:
    value = d.get(key)
    if isinstance(value, list) and len(value) == 2 and all(isinstance(v, (int, float))
                                                           for v in value):
        return float(value[0]), float(value[1])
    return None


def basename(path: str) -> str:
    return path.replace("\\", "/").rsplit("/", 1)[-1]


def _float(d: Mapping[str, object], key: str) -> float | None:
    value = d.get(key)
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _str(d: Mapping[str, object], key: str) -> str | None:
    value = d.get(key)
    return str(value) if value is not None else None


def _list(d: Mapping[str, object], key: str) -> list[object]:
    value = d.get(key)
    return list(value) if isinstance(value, list) else []


def _object(d: Mapping[str, object], key: str) -> Mapping[str, object]:
    value = d.get(key)
    return value if isinstance(value, Mapping) else {}
