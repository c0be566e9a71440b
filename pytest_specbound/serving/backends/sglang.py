"""SGLang: native ``/generate`` (cumulative text, ``meta_info`` spec fields on the last chunk)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from pytest_specbound.serving.backends.base import Backend, Prompt, with_info
from pytest_specbound.serving.records import RequestRecord, ServerInfo
from pytest_specbound.serving.transport import Endpoint

GEN_TOKENS = "sglang:generation_tokens_total"
VERIFY_CALLS = "sglang:spec_verify_calls_total"


class SGLang(Backend):
    name = "sglang"
    batching_setting = "--max-running-requests"
    ready_paths = ("/health_generate",)
    metric_names = (GEN_TOKENS, VERIFY_CALLS)

    def build_request(self, prompt: Prompt, max_tokens: int, model: str | None) -> tuple[str, dict[str, Any]]:
        if prompt.messages is not None:
            path, body = super().build_request(prompt, max_tokens, model)
            body["stream_options"]["continuous_usage_stats"] = True
            body["return_spec_tokens_details"] = True
            return path, body
        return "/generate", {
            "text": prompt.text,
            "sampling_params": {"max_new_tokens": max_tokens, "min_new_tokens": max_tokens,
                                "temperature": 0.0, "ignore_eos": True},
            "stream": True,
        }

    def event_tokens(self, obj: Any, state: dict[str, Any]) -> int:
        meta = obj.get("meta_info")
        if isinstance(meta, dict) and "completion_tokens" in meta:  # cumulative on /generate
            total = int(meta["completion_tokens"])
            new = total - int(state.get("cum", 0))
            state["cum"] = total
            return max(new, 0)
        return super().event_tokens(obj, state)

    def is_final(self, obj: Any) -> bool:
        meta = obj.get("meta_info")
        if isinstance(meta, dict) and meta.get("finish_reason"):
            return True
        return super().is_final(obj)

    def server_fields(self, events: list[tuple[float, Any]], record: RequestRecord) -> RequestRecord:
        spec: dict[str, Any] | None = None
        for _, o in events:
            if not isinstance(o, dict):
                continue
            meta = o.get("meta_info")
            if isinstance(meta, dict):
                record = replace(
                    record,
                    completion_tokens=int(meta.get("completion_tokens", record.completion_tokens)),
                    prompt_tokens=meta.get("prompt_tokens", record.prompt_tokens))
                if "spec_verify_ct" in meta:
                    spec = meta
            details = (o.get("sglext") or {}).get("spec_tokens_details")
            if isinstance(details, dict):
                spec = details
        if spec is None:
            return record
        changes: dict[str, Any] = {"server": {"spec": spec}}
        verify = int(spec.get("spec_verify_ct", 0))
        if verify > 0:
            # spec_accept_length = completion_tokens / verify counts the prefill token too;
            # the unbiased per-step value leaves it out.
            changes.update(accept_length=record.decode_tokens / verify, accept_source="server")
        if isinstance(spec.get("decode_throughput"), (int, float)):
            changes["server_decode_tok_s"] = float(spec["decode_throughput"])
        return replace(record, **changes)

    def accept_from_deltas(self, delta: dict[str, float], requests: int = 1) -> float | None:
        verify = delta.get(VERIFY_CALLS, 0.0)
        if verify <= 0:
            return None
        return (delta.get(GEN_TOKENS, 0.0) - requests) / verify  # less each request's prefill token

    def info(self, endpoint: Endpoint) -> ServerInfo:
        server = endpoint.get_json("/server_info") or endpoint.get_json("/get_server_info") or {}
        spec = {k: v for k, v in server.items() if k.startswith("speculative_") and v is not None}
        return with_info(super().info(endpoint), server.get("version"), spec)
