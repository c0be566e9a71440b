"""GPU telemetry while a class is measured: NVML sampled in a background thread, summarised.

Imported only when a GPU is in use. Every NVML call may fail (a field an older driver lacks, a
GPU lost mid-run): a failed field is left out of that sample, and a sampler that fails as a whole
stops with a note. Telemetry never fails a measurement by itself.
"""

from __future__ import annotations

import statistics
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

# one reading of one GPU, field -> value (clocks, power, temperature, link widths, a throttle
# bitmask, MIG mode, the processes on it as (pid, GB)); a field the GPU cannot give is absent
Reading = float | int | bool | list[tuple[int, float]]
GpuSample = dict[str, Reading]


DEFAULT_INTERVAL_S = 0.5  # 2 Hz: NVML queries cost tens of microseconds each
# nvmlClocksThrottleReasons bits (nvml.h); "gpu idle" and "applications clocks" are not problems
THROTTLE_REASONS = {0x4: "software power cap", 0x8: "hardware slowdown",
                    0x20: "software thermal slowdown", 0x40: "hardware thermal slowdown",
                    0x80: "hardware power brake"}
SLOW_CLOCK = 0.9  # a clock under this fraction of its maximum is throttled
NVLINK_MAX = 18


def _call(nvml: Any, name: str, *args: Any) -> Any:
    """``nvml.name(*args)``, or None where this pynvml lacks it or NVML cannot answer."""
    fn = getattr(nvml, name, None)
    if fn is None:
        return None
    try:
        return fn(*args)
    except Exception:  # NVMLError_NotSupported, a lost GPU, an old driver: leave the field out
        return None


def sample_gpu(nvml: Any, handle: Any) -> GpuSample:
    """One reading of one GPU; fields NVML cannot give are absent."""
    out: dict[str, Reading | None] = {}
    clock = getattr(nvml, "NVML_CLOCK_SM", 1), getattr(nvml, "NVML_CLOCK_MEM", 2)
    for name, kind in (("sm_clock_mhz", clock[0]), ("mem_clock_mhz", clock[1])):
        out[name] = _call(nvml, "nvmlDeviceGetClockInfo", handle, kind)
        out[name.replace("_clock", "_max_clock")] = _call(nvml, "nvmlDeviceGetMaxClockInfo", handle, kind)
    reasons = _call(nvml, "nvmlDeviceGetCurrentClocksThrottleReasons", handle)
    if reasons is None:  # drivers from 535 name them clock event reasons
        reasons = _call(nvml, "nvmlDeviceGetCurrentClocksEventReasons", handle)
    out["throttle"] = reasons
    power = _call(nvml, "nvmlDeviceGetPowerUsage", handle)
    limit = _call(nvml, "nvmlDeviceGetEnforcedPowerLimit", handle)
    default = _call(nvml, "nvmlDeviceGetPowerManagementDefaultLimit", handle)
    out.update(power_w=power / 1e3 if power is not None else None,
               power_limit_w=limit / 1e3 if limit is not None else None,
               power_default_w=default / 1e3 if default is not None else None)
    out["temperature_c"] = _call(nvml, "nvmlDeviceGetTemperature", handle,
                                 getattr(nvml, "NVML_TEMPERATURE_GPU", 0))
    util = _call(nvml, "nvmlDeviceGetUtilizationRates", handle)
    out["utilization_pct"] = getattr(util, "gpu", None)
    mem = _call(nvml, "nvmlDeviceGetMemoryInfo", handle)
    out["memory_used_gb"] = mem.used / 1e9 if mem is not None else None
    for name, fn in (("pcie_gen", "nvmlDeviceGetCurrPcieLinkGeneration"),
                     ("pcie_max_gen", "nvmlDeviceGetMaxPcieLinkGeneration"),
                     ("pcie_width", "nvmlDeviceGetCurrPcieLinkWidth"),
                     ("pcie_max_width", "nvmlDeviceGetMaxPcieLinkWidth")):
        out[name] = _call(nvml, fn, handle)
    links = [_call(nvml, "nvmlDeviceGetNvLinkState", handle, k) for k in range(NVLINK_MAX)]
    known = [x for x in links if x is not None]
    out["nvlink_active"] = sum(1 for x in known if x) if known else None
    procs = _call(nvml, "nvmlDeviceGetComputeRunningProcesses", handle)
    out["processes"] = ([(int(p.pid), (p.usedGpuMemory or 0) / 1e9) for p in procs]
                        if procs is not None else None)
    out["ecc_uncorrected"] = _call(nvml, "nvmlDeviceGetTotalEccErrors", handle,
                                   getattr(nvml, "NVML_MEMORY_ERROR_TYPE_UNCORRECTED", 1),
                                   getattr(nvml, "NVML_VOLATILE_ECC", 0))
    mig = _call(nvml, "nvmlDeviceGetMigMode", handle)
    out["mig"] = bool(mig[0]) if isinstance(mig, (list, tuple)) and mig else None
    return {k: v for k, v in out.items() if v is not None}


@dataclass
class Telemetry:
    """Samples every GPU at ``interval_s`` from :meth:`start` to :meth:`stop`."""

    nvml: Any
    interval_s: float = DEFAULT_INTERVAL_S
    is_server: Callable[[int], bool] | None = None  # pid -> the server's (None: unknown)
    samples: list[list[GpuSample]] = field(default_factory=list)  # per GPU, in order
    note: str | None = None
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def start(self) -> Telemetry:
        try:
            self.nvml.nvmlInit()
            count = int(self.nvml.nvmlDeviceGetCount())
            self._handles = [self.nvml.nvmlDeviceGetHandleByIndex(i) for i in range(count)]
        except Exception as exc:
            self.note = f"no GPU telemetry: NVML failed ({exc})"
            return self
        self.samples = [[] for _ in self._handles]
        self._thread = threading.Thread(target=self._run, daemon=True, name="specbound-nvml")
        self._thread.start()
        return self

    def _run(self) -> None:
        while True:
            try:
                for i, handle in enumerate(self._handles):
                    self.samples[i].append(sample_gpu(self.nvml, handle))
            except Exception as exc:  # never lost, never fatal: the summary says it stopped
                self.note = f"telemetry stopped early: {exc}"
                return
            if self._stop.wait(self.interval_s):
                return

    def stop(self) -> Mapping[str, object]:
        """The per-GPU summary as the results file keeps it (JSON), with a note where telemetry
        was partial or absent."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(5.0)
            for i, handle in enumerate(self._handles):  # one last reading: ECC at the end
                self.samples[i].append(sample_gpu(self.nvml, handle))
        _call(self.nvml, "nvmlShutdown")
        return {"gpus": [summarise(s, self.is_server) for s in self.samples],
                **({"note": self.note} if self.note else {})}


def _values(samples: Iterable[Mapping[str, Any]], key: str) -> list[Any]:
    return [s[key] for s in samples if key in s]


def summarise(samples: Sequence[GpuSample],
              is_server: Callable[[int], bool] | None = None) -> dict[str, Any]:
    """Medians, extremes and what was seen at all, for one GPU's samples."""
    out: dict[str, Any] = {"samples": len(samples)}
    for key in ("sm_clock_mhz", "mem_clock_mhz", "utilization_pct", "power_w"):
        vals = _values(samples, key)
        if vals:
            out[key] = {"median": statistics.median(vals), "min": min(vals), "max": max(vals)}
    for key in ("sm_max_clock_mhz", "mem_max_clock_mhz", "power_limit_w", "power_default_w",
                "pcie_max_gen", "pcie_max_width", "nvlink_active", "mig"):
        vals = _values(samples, key)
        if vals:
            out[key] = vals[-1]
    for key in ("temperature_c", "memory_used_gb"):
        vals = _values(samples, key)
        if vals:
            out[key] = max(vals)
    for key in ("pcie_gen", "pcie_width"):
        vals = _values(samples, key)
        if vals:
            out[key] = min(vals)
    masks = _values(samples, "throttle")
    if masks:
        seen = {name: sum(1 for m in masks if m & bit) / len(masks)
                for bit, name in THROTTLE_REASONS.items()}
        out["throttle"] = {k: round(v, 3) for k, v in seen.items() if v > 0}
    ecc = _values(samples, "ecc_uncorrected")
    if ecc:
        out["ecc_uncorrected_new"] = ecc[-1] - ecc[0]
    others: dict[int, float] = {}
    for procs in _values(samples, "processes"):
        for pid, gb in procs:
            if is_server is not None and not is_server(pid):
                others[pid] = max(others.get(pid, 0.0), gb)
    if is_server is not None:  # attached: whose a process is cannot be told, so none is named
        out["other_processes"] = [{"pid": p, "memory_gb": round(g, 2)} for p, g in others.items()]
    return out


def findings(summary: Mapping[str, Any] | None) -> list[tuple[str, str]]:
    """(kind, sentence) per finding that can explain a slower system; kind is ``throttle``,
    ``process``, ``pcie``, ``ecc``, ``power_cap`` or ``mig``; each GPU named by its index, or
    by its node and index where a DCGM exporter read it."""
    out: list[tuple[str, str]] = []
    for i, gpu in enumerate((summary or {}).get("gpus") or []):
        before = len(out)
        where = str(gpu.get("where") or f"GPU {i}")  # a DCGM exporter's: its node too
        reasons = gpu.get("throttle") or {}
        why = " and ".join(f"{name} ({share:.0%} of samples)" for name, share in reasons.items())
        for clock, top in (("mem_clock_mhz", "mem_max_clock_mhz"), ("sm_clock_mhz", "sm_max_clock_mhz")):
            now, peak = (gpu.get(clock) or {}).get("median"), gpu.get(top)
            if now is not None and peak and now < SLOW_CLOCK * peak:
                label = "memory" if clock.startswith("mem") else "SM"
                cause = why or "no throttle reason reported"
                out.append(("throttle", f"{label} clock {now:.0f} MHz, max {peak:.0f}: {cause} on "
                                        f"{where}"))
        if reasons and len(out) == before:
            out.append(("throttle", f"clocks throttled on {where}: {why}"))
        for p in gpu.get("other_processes") or []:
            out.append(("process", f"another process (pid {p['pid']}, {p['memory_gb']:.1f} GB) "
                                   f"on {where}"))
        gen, width = gpu.get("pcie_gen"), gpu.get("pcie_width")
        max_gen, max_width = gpu.get("pcie_max_gen"), gpu.get("pcie_max_width")
        if gen and width and max_gen and max_width and (gen < max_gen or width < max_width):
            out.append(("pcie", f"PCIe link Gen{gen} x{width}, capable Gen{max_gen} x{max_width} "
                                f"on {where}: allreduce is slower than the roofline assumes"))
        if gpu.get("ecc_uncorrected_new"):
            out.append(("ecc", f"{gpu['ecc_uncorrected_new']} new uncorrected ECC errors on "
                               f"{where}"))
        limit, default = gpu.get("power_limit_w"), gpu.get("power_default_w")
        if limit and default and limit < 0.95 * default:
            out.append(("power_cap", f"power limit {limit:.0f} W, default {default:.0f} W on "
                                     f"{where}"))
        if gpu.get("mig"):
            out.append(("mig", f"MIG is enabled on {where}: the roofline assumes the whole GPU"))
    return out


def in_process_group(pgid: int) -> Callable[[int], bool]:
    """pid -> whether it belongs to process group ``pgid`` (a launched server and its workers)."""
    import os

    def check(pid: int) -> bool:
        try:
            return os.getpgid(pid) == pgid
        except OSError:  # gone, or in another pid namespace: not ours to know, so not ours
            return False

    return check


def start_telemetry(is_server: Callable[[int], bool] | None = None,
                    interval_s: float = DEFAULT_INTERVAL_S) -> Telemetry | None:
    """Telemetry through ``pynvml`` (nvidia-ml-py), or None where it is not installed."""
    try:
        import pynvml
    except ImportError:
        return None
    return Telemetry(pynvml, interval_s, is_server).start()
