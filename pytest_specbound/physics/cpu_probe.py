"""Measure this host's memory bandwidth and matmul rate with short numpy probes (cached).

:func:`probe_cpu` is the host as a whole (every core, a working set far above any cache);
:func:`read_bandwidth` is what one server sees: its thread count, over a working set the size of
what it reads per step (a model that fits in the last-level cache is measured as such).
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, NamedTuple

from pytest_specbound._toml import TomlTable
from pytest_specbound.atomic import write_json
from pytest_specbound.errors import ConfigError
from pytest_specbound.values import ValueProblem, number

CACHE = Path(os.environ.get("SPECBOUND_CACHE_DIR")
             or Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "specbound"
             ) / "cpu.json"
PROBE_BYTES = 512 * 1024 * 1024  # far above any last-level cache


CACHE_FORMAT = 3  # 2: every cached figure came from an uncontended probe; 3: reads by max
MIN_CPU_SHARE = 0.75  # a probe whose threads got less of the CPU than this was contended


class Probe(NamedTuple):
    """A measured rate and the share of the CPU its threads got while measuring it."""

    value: float
    cpu_share: float

    @property
    def contended(self) -> bool:
        """Other work held the cores: the rate reads low and must not be cached."""
        return self.cpu_share < MIN_CPU_SHARE


def _busy_cpu_s() -> float | None:
    """CPU seconds the whole machine has spent busy (Linux ``/proc/stat``), or None."""
    try:
        with open("/proc/stat", encoding="ascii") as f:
            fields = f.readline().split()[1:]
        user, nice, system, _idle, _iowait, irq, softirq, steal = (int(x) for x in fields[:8])
    except (OSError, ValueError):
        return None
    return (user + nice + system + irq + softirq + steal) / (os.sysconf("SC_CLK_TCK") or 100)


def _own_cpu_s() -> float:
    """CPU seconds this process and its waited-for children (a finished probe) have used."""
    import resource

    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return time.process_time() + children.ru_utime + children.ru_stime


class OtherWork:
    """The CPU the rest of the machine used while a probe ran (Linux ``/proc/stat`` less this
    process and its finished children), as one less a share of all cores: 1.0 on a quiet host.
    Other work takes cores, memory bandwidth and cache from a probe without showing in the
    probe's own CPU time."""

    def __init__(self) -> None:
        self.started = time.perf_counter()
        self.own = _own_cpu_s()
        self.busy = _busy_cpu_s()

    def share_left(self) -> float:
        busy = _busy_cpu_s()
        elapsed = (time.perf_counter() - self.started) * (os.cpu_count() or 1)
        if busy is None or self.busy is None or elapsed < 0.05:
            return 1.0
        others = (busy - self.busy) - (_own_cpu_s() - self.own)
        return 1.0 - min(1.0, max(0.0, others) / elapsed)


class _CpuShare:
    """The share of the CPU the probe's threads got while they worked: the lower of (a) each
    timed call's thread CPU time over its own wall time (a thread descheduled mid-call) and (b)
    :class:`OtherWork` (other work that ran beside short calls without descheduling them,
    still taking memory bandwidth and cache)."""

    def __init__(self) -> None:
        self.cpu = self.wall = 0.0
        self.others = OtherWork()

    def timed(self, work: Any) -> Any:
        cpu, wall = time.thread_time(), time.perf_counter()
        result = work()
        self.cpu += time.thread_time() - cpu
        self.wall += time.perf_counter() - wall
        return result

    def share(self) -> float:
        threads = min(1.0, self.cpu / self.wall) if self.wall > 0 else 1.0
        return min(threads, self.others.share_left())


ATTEMPTS = 3  # a contended probe is taken again this many times in all, a moment apart
RETRY_PAUSE_S = 0.5


def quietest(measure: Callable[[], Probe], attempts: int = ATTEMPTS) -> Probe:
    """``measure`` until one attempt is not contended, at most ``attempts`` times: the highest
    rate seen (contention only slows a probe) and the highest share (cache it when any attempt
    ran on a quiet host). A burst of other work no longer decides the roofline of a whole run."""
    taken = [measure()]
    while taken[-1].contended and len(taken) < attempts:
        time.sleep(RETRY_PAUSE_S * len(taken))
        taken.append(measure())
    return Probe(max(p.value for p in taken), max(p.cpu_share for p in taken))


def _read_bandwidth_gbs(np: Any, threads: int) -> Probe:
    from concurrent.futures import ThreadPoolExecutor

    chunks = [np.ones(PROBE_BYTES // 8 // threads, dtype=np.float64) for _ in range(threads)]
    best = 0.0
    clock = _CpuShare()
    with ThreadPoolExecutor(threads) as pool:
        for _ in range(5):
            start = time.perf_counter()
            # max: a SIMD read that releases the GIL; sum's pairwise adds read ~40% slower
            list(pool.map(lambda a: clock.timed(a.max), chunks))
            best = max(best, PROBE_BYTES / (time.perf_counter() - start) / 1e9)
    src = np.ones(PROBE_BYTES // 8 // 2, dtype=np.float64)
    dst = np.empty_like(src)
    for _ in range(3):
        start = time.perf_counter()
        clock.timed(lambda: np.copyto(dst, src))
        best = max(best, 2 * src.nbytes / (time.perf_counter() - start) / 1e9)  # read + write
    return Probe(best, clock.share())


def _matmul_tflops(np: Any) -> float:
    a = np.ones((1024, 1024), dtype=np.float32)
    best = 0.0
    for _ in range(5):
        start = time.perf_counter()
        a @ a
        best = max(best, 2 * 1024**3 / (time.perf_counter() - start) / 1e12)
    return best


@functools.lru_cache(maxsize=1)
def host_fingerprint() -> str:
    """Core count and CPU model: a cached figure is reused only on the same kind of machine."""
    model = ""
    with contextlib.suppress(OSError), open("/proc/cpuinfo", encoding="utf-8",
                                            errors="replace") as f:
        model = next((ln.split(":", 1)[1].strip() for ln in f
                      if ln.lower().startswith("model name")), "")
    return f"{os.cpu_count() or 1} cores, {model or 'unknown CPU'}"


def load_cache() -> TomlTable:
    """The cache file, when it was written on this kind of machine by probes that were not
    contended (format 2); else empty. Older files may hold a probe taken under load: they are
    measured again once."""
    with contextlib.suppress(OSError, ValueError):
        loaded = json.loads(CACHE.read_text())
        if (isinstance(loaded, dict) and loaded.get("host") == host_fingerprint()
                and loaded.get("format") == CACHE_FORMAT):
            return loaded
    return {}


def save_cache(entries: TomlTable) -> None:
    with contextlib.suppress(OSError):
        write_json(CACHE, {**load_cache(), **entries, "host": host_fingerprint(),
                           "format": CACHE_FORMAT})


def forget_probes() -> bool:
    """Drop this host's cached figures (every probe runs again next time); whether any were
    there. A cached figure taken while a shared host ran slow is a ceiling too low."""
    cached = load_cache()
    if not any(k not in ("host", "format") for k in cached):
        return False
    with contextlib.suppress(OSError):
        write_json(CACHE, {"host": cached["host"], "format": cached["format"]})
    return True


def contended_note(probe: Probe) -> str:
    return (f" (contended: its threads got at most {probe.cpu_share:.0%} of the CPU in "
            f"{ATTEMPTS} tries; not cached, measured again next run)")


BANDWIDTH_OVERRIDE = "SPECBOUND_CPU_BANDWIDTH_GBS"


def bandwidth_override() -> float | None:
    """GB/s from ``SPECBOUND_CPU_BANDWIDTH_GBS``, which replaces every read probe; None unset."""
    text = os.environ.get(BANDWIDTH_OVERRIDE)
    if not text:
        return None
    try:
        return number(text, 0.0, open_low=True)
    except ValueProblem as exc:
        raise ConfigError(f"{BANDWIDTH_OVERRIDE}={text}: {exc} (GB/s)") from None


@dataclass(frozen=True)
class HostProbe:
    """This host as a whole: read bandwidth, fp32 matmul rate, cores, and where they came from."""

    cores: int
    bandwidth_gbs: float
    fp32_tflops: float
    source: str


def probe_cpu(refresh: bool = False) -> HostProbe:
    """Bandwidth (GB/s), fp32 TFLOP/s and core count of this host; cached per kind of machine."""
    cores = os.cpu_count() or 1
    cached = load_cache()
    if not refresh and isinstance(cached.get("bandwidth_gbs"), (int, float)):
        probe = HostProbe(int(cached.get("cores") or cores), float(cached["bandwidth_gbs"]),
                          float(cached.get("fp32_tflops") or 0.0), str(cached.get("source", "")))
    else:
        import numpy as np

        read = quietest(lambda: _read_bandwidth_gbs(np, cores))
        probe = HostProbe(cores, round(read.value, 2), round(_matmul_tflops(np), 4),
                          f"measured on this host ({cores} cores): numpy read/copy and 1024^2 "
                          "matmul")
        if read.contended:
            probe = replace(probe, source=probe.source + contended_note(read))
        else:
            save_cache({"cores": probe.cores, "bandwidth_gbs": probe.bandwidth_gbs,
                        "fp32_tflops": probe.fp32_tflops, "source": probe.source})
    override = bandwidth_override()
    if override is not None:
        probe = replace(probe, bandwidth_gbs=override, source=BANDWIDTH_OVERRIDE)
    return probe


MIN_WORKING_SET = 1 << 20  # 1 MiB: below this the probe measures loop overhead, not memory
MAX_WORKING_SET = PROBE_BYTES  # above any cache: more only takes longer


def working_set_bucket(num_bytes: float) -> int:
    """The probe's working set for ``num_bytes``: the next step of a half-octave ladder (1, 1.4,
    2, 2.8, 4 ... MiB), within the limits, so a size is never rounded up by more than 41%."""
    k = 0
    while MIN_WORKING_SET * 2 ** (k / 2) < num_bytes and MIN_WORKING_SET * 2 ** (k / 2) < MAX_WORKING_SET:
        k += 1
    return min(MAX_WORKING_SET, int(MIN_WORKING_SET * 2 ** (k / 2)))


def read_bandwidth(threads: int, working_set: float, refresh: bool = False) -> tuple[float, str]:
    """(GB/s, source) reading ``working_set`` bytes over and over with ``threads`` threads.

    Cached per (threads, working-set bucket) beside the host probe. ``SPECBOUND_CPU_BANDWIDTH_GBS``
    overrides it as it overrides the host probe.
    """
    override = bandwidth_override()
    if override is not None:
        return override, BANDWIDTH_OVERRIDE
    threads = max(1, threads)
    size = working_set_bucket(working_set)
    key = f"read:{threads}:{size}"
    source = (f"measured on this host: {threads} thread{'s' * (threads != 1)} reading "
              f"{size / 2**20:g} MiB, the size of one step's reads")
    cached = load_cache().get(key)
    if not refresh and isinstance(cached, (int, float)):
        return float(cached), source
    import numpy as np

    probe = quietest(lambda: _repeated_read_gbs(np, threads, size))
    gbs = round(float(probe.value), 2)
    if probe.contended:
        return gbs, source + contended_note(probe)
    save_cache({key: gbs})
    return gbs, source


def _repeated_read_gbs(np: Any, threads: int, size: int) -> Probe:
    """Best rate of whole passes over ``size`` bytes split across ``threads`` threads; each timing
    spans enough passes to last about 20 ms, and the first pass warms the caches."""
    from concurrent.futures import ThreadPoolExecutor

    chunks = [np.ones(max(1, size // 8 // threads), dtype=np.float64) for _ in range(threads)]
    total = sum(c.nbytes for c in chunks)

    clock = _CpuShare()

    def passes(n: int) -> float:
        start = time.perf_counter()
        for _ in range(n):
            list(pool.map(lambda a: clock.timed(a.max), chunks))  # as above
        return time.perf_counter() - start

    with ThreadPoolExecutor(threads) as pool:
        one = max(passes(1), 1e-6)
        n = max(1, int(0.02 / one))
        best = min(passes(n) for _ in range(5)) / n
    return Probe(float(total) / best / 1e9, clock.share())
