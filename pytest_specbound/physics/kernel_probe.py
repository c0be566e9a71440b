"""The compute ceiling of llama.cpp's own kernels on this host, for one GGUF model (cached).

On a CPU the rate a server multiplies at depends on its kernels for the weight dtype, on the
instruction set (F16C only, AVX-512 BF16, VNNI, AMX) and on the batch: llama.cpp reads the
weights at full bandwidth for one token and reaches its peak rate at hundreds, but a verify step
of 4 or 16 tokens runs between the two (measured on one host: a 4-token f16 forward took twice
its memory read; Q4_0's took 1.6x its peak rate). An fp32 numpy matmul bounds none of this. The
ceiling here is ``llama-bench`` (shipped beside ``llama-server``) running the served model's
forward over exactly the verify step's tokens, with the server's thread count: the server's own
kernels at the step's shape. It bounds this llama.cpp build, not the hardware (a faster kernel
library would beat it); the efficiency then measures the rest of the round: drafting, sampling,
scheduling, streaming.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
from collections.abc import Mapping
from pathlib import Path

from pytest_specbound.physics.cpu_probe import (
    OtherWork,
    Probe,
    contended_note,
    load_cache,
    quietest,
    save_cache,
)

BENCH_NAME = "llama-bench"
SERVER_NAMES = ("llama-server", "server")
TIMEOUT_S = 180.0
REPETITIONS = 5


def bench_beside(launch: str | None) -> Path | None:
    """``llama-bench`` next to the launch command's ``llama-server`` binary, if it is there."""
    try:
        argv = shlex.split(launch or "")
    except ValueError:
        return None
    if not argv or Path(argv[0]).name not in SERVER_NAMES:
        return None
    bench = Path(argv[0]).with_name(BENCH_NAME)
    return bench if bench.is_file() and os.access(bench, os.X_OK) else None


def _run_bench(bench: Path, gguf: Path, threads: int, tokens: int) -> Probe:
    """The fastest repetition's tokens/s from one run, and the share of the host the rest of
    the machine left it (the bench's own model load and start-up are its own work, not
    contention)."""
    others = OtherWork()
    done = subprocess.run(
        [str(bench), "-m", str(gguf), "-p", str(tokens), "-n", "0", "-t", str(threads),
         "-r", str(REPETITIONS), "-o", "json"],
        capture_output=True, text=True, timeout=TIMEOUT_S, check=True,
    )
    (row,) = json.loads(done.stdout)
    return Probe(max(float(s) for s in row["samples_ts"]), others.share_left())


def _identity(path: Path) -> str:
    stat = path.stat()
    return f"{path.resolve()}:{stat.st_size}:{stat.st_mtime_ns}"


def kernel_tokens_per_s(
    bench: Path, gguf: Path, threads: int, tokens: int, refresh: bool = False
) -> tuple[float, str] | None:
    """(tokens per second, source): llama.cpp's forward over ``tokens`` tokens of ``gguf`` with
    ``threads`` threads, the fastest of a few repetitions. Cached per (threads, tokens, model
    file, llama-bench build) beside the bandwidth probes; a run that other work contended is
    taken again (:func:`quietest`), and used once and not cached if it stays contended. None
    when the bench cannot run: the roofline then keeps the host's matmul probe."""
    tokens = max(1, tokens)
    try:
        key = f"kernel:{threads}:{tokens}:{_identity(gguf)}:{_identity(bench)}"
    except OSError:
        return None
    source = (f"llama-bench on this host: the served model's forward over {tokens} "
              f"token{'s' * (tokens != 1)} with {threads} thread{'s' * (threads != 1)}, "
              "llama.cpp's own kernels for its dtype")
    cache = load_cache()
    fewer = {int(k.split(":")[2]): float(v) for k, v in cache.items()
             if k.startswith(f"kernel:{threads}:") and k.endswith(key.split(":", 3)[3])
             and isinstance(v, (int, float)) and int(k.split(":")[2]) < tokens}
    cached = cache.get(key)
    if not refresh and isinstance(cached, (int, float)):
        return at_least_fewer(float(cached), tokens, fewer, source)
    try:
        probe = quietest(lambda: _run_bench(bench, gguf, threads, tokens))
    except (OSError, ValueError, KeyError, TypeError, subprocess.SubprocessError):
        return None
    if probe.contended:
        return at_least_fewer(probe.value, tokens, fewer, source + contended_note(probe))
    save_cache({key: round(probe.value, 3)})
    return at_least_fewer(probe.value, tokens, fewer, source)


def at_least_fewer(rate: float, tokens: int, fewer: Mapping[int, float],
                   source: str) -> tuple[float, str]:
    """A forward over more tokens never runs fewer tokens per second than one over fewer (the
    weights are read once either way): ``rate`` raised to the best of ``fewer`` (token count ->
    tokens/s, probed on this host), where the probe of ``tokens`` read slower."""
    if not fewer:
        return rate, source
    best_tokens, best = max(fewer.items(), key=lambda kv: kv[1])
    if best <= rate:
        return rate, source
    return best, (f"{source}; raised to the {best_tokens}-token forward's rate ({best:.0f} "
                  f"tokens/s; this probe read {rate:.0f}): more tokens never run slower per "
                  "token")
