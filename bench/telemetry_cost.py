"""Does sampling GPU telemetry slow the server? Side by side in one run, interleaved.

A real llama-server on this machine decodes while the telemetry sampler runs at its default rate
(2 Hz) and at 50x that, against the same requests with no sampler; the server's own decode rate
(its timings) is compared. There is no GPU here: the sampler reads a fake NVML whose every call
takes 50 us (real NVML queries take tens of microseconds), so what this measures is the
sampler's own cost in the client process, on the CPUs it shares with the server. Target >= 0.98.

Paired server rates on a 2-core VM carry +-5% of noise per pair, more than the effect; the bench
therefore also measures the sampler's CPU time per wall second directly, which bounds what it can
take from a server on the same cores (the headline). On a real GPU the driver's side of NVML is
not measured here.
"""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from pytest_specbound.measure.sampler import Sampler  # noqa: E402
from pytest_specbound.measure.telemetry import DEFAULT_INTERVAL_S, Telemetry  # noqa: E402
from pytest_specbound.serving.backends.base import Prompt  # noqa: E402
from pytest_specbound.serving.backends.llamacpp import LlamaCpp, llama_server_binary  # noqa: E402
from pytest_specbound.serving.server import LaunchSpec, Readiness, start_server  # noqa: E402
from tests.servers.fake_nvml import FakeNVML  # noqa: E402

CALL_S = 50e-6
PAIRS = 15


class SlowNVML(FakeNVML):
    def _tick(self) -> None:
        end = time.perf_counter() + CALL_S
        while time.perf_counter() < end:
            pass
        super()._tick()


def rate(sampler: Sampler, interval_s: float | None) -> float:
    """The server's decode rate for one request, with the sampler running at ``interval_s``."""
    tele = Telemetry(SlowNVML(gpus=2), interval_s).start() if interval_s else None
    try:
        rec = sampler.one(Prompt(text="Count from one to a hundred."), 128)
    finally:
        summary = tele.stop() if tele else None
    if summary is not None:
        assert summary["gpus"][0]["samples"] >= 1
    return rec.server_decode_tok_s or 0.0


def sampler_cpu_share(interval_s: float, seconds: float = 4.0) -> float:
    """CPU seconds the sampler takes per wall second (the main thread sleeps meanwhile, so the
    process's CPU time is the sampler's): the most it can take from a server on these cores."""
    tele = Telemetry(SlowNVML(gpus=2), interval_s).start()
    cpu, wall = time.process_time(), time.perf_counter()
    time.sleep(seconds)
    share = (time.process_time() - cpu) / (time.perf_counter() - wall)
    tele.stop()
    return share


def main() -> None:
    from pytest_specbound.physics.demo import demo_models

    idle = sampler_cpu_share(3600.0, 2.0)  # started, never sampling again: the floor
    shares = {hz: max(0.0, sampler_cpu_share(1 / hz) - idle) for hz in (1 / DEFAULT_INTERVAL_S, 100)}

    models = demo_models()
    argv = [llama_server_binary(), "-m", models["demo_gguf"], "--host", "{host}", "--port",
            "{port}", "-t", "1", "-c", "2048", "-np", "1"]
    server = start_server(LaunchSpec(argv), Readiness(("/health",), 120), Path(".specbound/logs"))
    sampler = Sampler(server.endpoint, LlamaCpp())
    pairs: dict[str, list[float]] = {"2 Hz": [], "100 Hz": [], "none (control)": []}
    try:
        sampler.one(Prompt(text="warm up"), 32)
        for _ in range(PAIRS):  # back-to-back pairs, so drift hits both requests of a pair alike
            for name, interval in (("2 Hz", DEFAULT_INTERVAL_S), ("100 Hz", 0.01),
                                   ("none (control)", None)):
                with_it, without = rate(sampler, interval), rate(sampler, None)
                pairs[name].append(with_it / without)
    finally:
        server.stop()
    print("llama-server (demo model, 1 thread): the server's own decode rate per request, with "
          "the sampler over without, in back-to-back pairs")
    print(f"{'sampler':>15} {'median ratio':>12} {'quartiles':>15}")
    for name, ratios in pairs.items():
        q = statistics.quantiles(ratios, n=4)
        print(f"{name:>15} {statistics.median(ratios):>12.3f} {q[0]:>7.3f}-{q[2]:.3f}")
    print()
    print("the sampler's own CPU (2 GPUs, 50 us per NVML call), per wall second:")
    for hz, share in shares.items():
        print(f"{hz:>12g} Hz {share:>10.3%} of one core")
    low = 1 - shares[1 / DEFAULT_INTERVAL_S]
    print(f"headline: at {1 / DEFAULT_INTERVAL_S:g} Hz the sampler takes "
          f"{shares[1 / DEFAULT_INTERVAL_S]:.3%} of one core, so a server sharing these cores "
          f"keeps at least {low:.4f} of its rate (target >= 0.98); the paired server rates read "
          f"{statistics.median(pairs['2 Hz']):.3f} with it, {statistics.median(pairs['none (control)']):.3f} "
          "in the control (this machine's noise, wider than the effect)")


if __name__ == "__main__":
    main()
