"""TensorRT-LLM ``trtllm-serve``: ``avg_decoded_tokens_per_iter``; JSON iteration stats."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

from pytest_specbound.serving.backends.base import Backend, with_info
from pytest_specbound.serving.records import RequestRecord, ServerInfo
from pytest_specbound.serving.transport import Endpoint

ACCEPTED = "numAcceptedTokens"
WITH_DRAFT = "numRequestsWithDraftTokens"


class TRTLLM(Backend):
    name = "trtllm"
    batching_setting = "--max_batch_size"
    ready_paths = ("/health",)
    metric_names = (ACCEPTED, WITH_DRAFT)
    drains_metrics = True  # GET /metrics empties the iteration-stats queue

    def build_request(self, prompt: Any, max_tokens: int, model: str | None) -> tuple[str, dict[str, Any]]:
        path, body = super().build_request(prompt, max_tokens, model)
        body["stream_options"]["continuous_usage_stats"] = True
        return path, body  # extra="forbid": no fields beyond the protocol's own

    def server_fields(self, events: list[tuple[float, Any]], record: RequestRecord) -> RequestRecord:
        value = None
        for _, o in events:
            for c in (o.get("choices") or []) if isinstance(o, dict) else []:
                if c.get("avg_decoded_tokens_per_iter") is not None:
                    value = float(c["avg_decoded_tokens_per_iter"])
        if value is None:
            return record
        return replace(record, server={"avg_decoded_tokens_per_iter": value},
                       accept_length=value, accept_source="server")

    def scrape(self, endpoint: Endpoint) -> dict[str, float] | None:
        """Drain the iteration-stats queue (JSON ``/metrics``) and sum its spec counters."""
        status, body = endpoint.get("/metrics")
        if status != 200:
            return None
        try:
            entries = json.loads(body)
        except ValueError:
            return None
        totals = {ACCEPTED: 0.0, WITH_DRAFT: 0.0}
        for entry in entries if isinstance(entries, list) else []:
            stats = entry.get("specDecodingStats") or {}
            for key in totals:
                totals[key] += float(stats.get(key, 0))
        return totals

    def accept_from_deltas(self, delta: dict[str, float], requests: int = 1) -> float | None:
        # the queue is drained on read, so the "after" scrape is itself the window
        steps = delta.get(WITH_DRAFT, 0.0)
        return (delta.get(ACCEPTED, 0.0) + steps) / steps if steps > 0 else None

    def info(self, endpoint: Endpoint) -> ServerInfo:
        version = endpoint.get_json("/version") or {}
        return with_info(super().info(endpoint), version.get("version"))
