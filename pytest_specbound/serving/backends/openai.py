"""Any OpenAI-compatible server: no accept statistics, so the stream-burst estimate is used."""

from __future__ import annotations

from pytest_specbound.serving.backends.base import Backend


class OpenAIGeneric(Backend):
    name = "openai"
    ready_paths = ("/v1/models",)
    metrics_path = None
