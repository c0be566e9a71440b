"""The results JSON (schema-versioned, atomic) and the pytest-benchmark compatible JSON."""

from __future__ import annotations

import datetime
import json
import platform
import statistics
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from pytest_specbound.atomic import write_json
from pytest_specbound.errors import SpecboundError
from pytest_specbound.gate.verdicts.result import ClassResult, basename
from pytest_specbound.version import __version__

RunInfo = Mapping[str, object]  # hardware, budgets and their hashes, servers, models, confidence

SCHEMA_VERSION = 1


def results_document(results: Sequence[ClassResult], partial: bool,
                     run: RunInfo) -> dict[str, object]:
    return {
        "schema_version": SCHEMA_VERSION,
        "tool": f"pytest-specbound {__version__}",
        "created": datetime.datetime.now(datetime.timezone.utc).isoformat(),
        "partial": partial,
        "run": dict(run),
        "results": [r.to_json() for r in results],
    }


def write_results(path: Path, results: Sequence[ClassResult], partial: bool, run: RunInfo,
                  update: Callable[[dict[str, object]], None] | None = None) -> None:
    """The results file, atomically; ``update`` may add to the document first (the plugin's
    ``pytest_specbound_update_json`` hook)."""
    doc = results_document(results, partial, run)
    if update is not None:
        update(doc)
    write_json(path, doc)


def read_results(path: Path) -> list[ClassResult]:
    """The class results of a results file; a file that is not one is a one-line error."""
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise SpecboundError(f"{path}: not a specbound results file ({exc})") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("results"), list):
        raise SpecboundError(f"{path}: not a specbound results file (no 'results' list)")
    out = []
    for i, entry in enumerate(doc["results"]):
        try:
            out.append(ClassResult.from_json(entry if isinstance(entry, dict) else {}))
        except ValueError as exc:
            raise SpecboundError(f"{path}: results[{i}]: {exc}") from None
    return out


def _stats(times: list[float]) -> dict[str, object]:
    """pytest-benchmark's stats block over per-request seconds per decode token."""
    data = sorted(times)
    n = len(data)
    if n == 0:
        data, n = [0.0], 1
    q1, median, q3 = (statistics.quantiles(data, n=4) if n > 1 else (data[0],) * 3)
    iqr = q3 - q1
    mean = statistics.fmean(data)
    stddev = statistics.stdev(data) if n > 1 else 0.0
    return {"min": data[0], "max": data[-1], "mean": mean, "stddev": stddev, "rounds": n,
            "median": median, "iqr": iqr, "q1": q1, "q3": q3, "iqr_outliers": 0,
            "stddev_outliers": 0, "outliers": "0;0", "ld15iqr": data[0], "hd15iqr": data[-1],
            "ops": 1 / mean if mean else 0.0, "total": sum(data), "iterations": 1,
            "data": data}


def benchmark_document(results: Sequence[ClassResult], run: RunInfo) -> dict[str, object]:
    """A file ``pytest-benchmark compare`` loads; time unit = seconds per decode token."""
    benches = []
    for r in results:
        per_token = [req.decode_s / max(1, req.completion_tokens - 1)
                     for req in r.requests if req.decode_s]
        name = f"{r.class_name}[{r.hardware}]"
        v = r.verdict
        benches.append({
            "group": basename(r.budget), "name": name,
            "fullname": f"{r.budget}::{name}", "params": {"hardware": r.hardware},
            "param": r.hardware, "options": {"timer": "perf_counter", "min_rounds": 1,
                                             "max_time": 0, "disable_gc": False,
                                             "warmup": False, "min_time": 0},
            "stats": _stats(per_token),
            "extra_info": {
                "accept_length": r.accept_length,
                "accept_band": list(r.accept_band) if r.accept_band else None,
                "accept_source": r.accept_source, "decode_tok_s": r.decode_tok_s,
                "roofline_tok_s": v.roofline_tok_s, "floor_tok_s": v.floor_tok_s,
                "efficiency": v.efficiency, "verdict": v.status, "reasons": list(v.reasons)},
        })
    return {
        "machine_info": {"node": platform.node(), "processor": platform.processor(),
                         "machine": platform.machine(), "python_version": platform.python_version(),
                         "python_implementation": platform.python_implementation(),
                         "system": platform.system(), "release": platform.release(),
                         "cpu": {}, "specbound": dict(run)},
        "commit_info": {},
        "benchmarks": benches,
        "datetime": datetime.datetime.now(datetime.timezone.utc).isoformat(),
        "version": "5.1.0",
    }


def write_benchmark(path: Path, results: Sequence[ClassResult], run: RunInfo) -> None:
    write_json(path, benchmark_document(results, run))
