"""The per-round scheduler-and-sampling constant of each serving engine, each with its source.

A budget's ``[roofline] overhead_ms`` wins; without it the roofline takes its backend's figure.
Where no measurement of an engine was found the seed deployment's SGLang figure stands in, and
its source says so.
"""

from __future__ import annotations

BACKEND_OVERHEAD_MS: dict[str, tuple[float, str]] = {
    "sglang": (0.5, "docs/seed-profile.md: the SGLang TP2 deployment's breakdown, "
                    "scheduler and sampling 0.5 ms per round"),
    "vllm": (0.2, "vllm-project/vllm#6913: Llama3-70B on 4x H100 at batch 1, output processing "
                  "(_process_model_outputs) 0.2 ms of a 19 ms step, the CPU work the GPU waits "
                  "for at batch 1"),
}
FALLBACK = (0.5, "no measurement of this engine's per-round overhead found: the seed "
                 "deployment's SGLang 0.5 ms [assumed]")


def overhead_for(backend: str | None) -> tuple[float, str]:
    """(ms per round, source) for a backend name (``auto`` or unknown: the fallback)."""
    return BACKEND_OVERHEAD_MS.get((backend or "").lower(), FALLBACK)
