"""The results JSON (schema-versioned, atomic) and the pytest-benchmark compatible JSON."""

from __future__ import annotations

import datetime
import platform
import statistics
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pytest_specbound import __version__
from pytest_specbound.atomic import write_json

SCHEMA_VERSION = 1


def results_document(results: Sequence[dict[str, Any]], partial: bool,
                     run: dict[str, Any]) -> dict[str, Any]:
    return {
        "schema_version": SCHEMA_VERSION,
        "tool": f"pytest-specbound {__version__}",
        "created": datetime.datetime.now(datetime.timezone.utc).isoformat(),
        "partial": partial,
        "run": run,
        "results": list(results),
    }


def write_results(path: Path, results: Sequence[dict[str, Any]], partial: bool,
                  run: dict[str, Any]) -> None:
    write_json(path, results_document(results, partial, run))


def _stats(times: list[float]) -> dict[str, Any]:
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


def benchmark_document(results: Sequence[dict[str, Any]], run: dict[str, Any]) -> dict[str, Any]:
    """A file ``pytest-benchmark compare`` loads; time unit = seconds per decode token."""
    benches = []
    for r in results:
        per_token = [req["decode_s"] / max(1, req["completion_tokens"] - 1)
                     for req in r.get("requests", []) if req.get("decode_s")]
        name = f"{r['class']}[{r['hardware']}]"
        benches.append({
            "group": Path(r["budget"]).name, "name": name,
            "fullname": f"{r['budget']}::{name}", "params": {"hardware": r["hardware"]},
            "param": r["hardware"], "options": {"timer": "perf_counter", "min_rounds": 1,
                                                "max_time": 0, "disable_gc": False,
                                                "warmup": False, "min_time": 0},
            "stats": _stats(per_token),
            "extra_info": {k: r.get(k) for k in (
                "accept_length", "accept_band", "accept_source", "decode_tok_s",
                "roofline_tok_s", "floor_tok_s", "efficiency", "verdict", "reasons")},
        })
    return {
        "machine_info": {"node": platform.node(), "processor": platform.processor(),
                         "machine": platform.machine(), "python_version": platform.python_version(),
                         "python_implementation": platform.python_implementation(),
                         "system": platform.system(), "release": platform.release(),
                         "cpu": {}, "specbound": run},
        "commit_info": {},
        "benchmarks": benches,
        "datetime": datetime.datetime.now(datetime.timezone.utc).isoformat(),
        "version": "5.1.0",
    }


def write_benchmark(path: Path, results: Sequence[dict[str, Any]], run: dict[str, Any]) -> None:
    write_json(path, benchmark_document(results, run))
