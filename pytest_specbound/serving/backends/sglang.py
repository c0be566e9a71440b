"""SGLang: native ``/generate`` (cumulative text, ``meta_info`` spec fields on the last chunk)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from pytest_specbound.serving.backends.base import (
    GREEDY,
    Backend,
    Prompt,
    Sampling,
    StreamState,
    with_info,
)
from pytest_specbound.serving.records import RequestRecord, ServerInfo
from pytest_specbound.serving.settings import Served, flag_value, runs
from pytest_specbound.serving.transport import Endpoint, RequestBody

GEN_TOKENS = "sglang:generation_tokens_total"
VERIFY_CALLS = "sglang:spec_verify_calls_total"


class SGLang(Backend):
    name = "sglang"
    batching_setting = "--max-running-requests"
    cached_tokens_setting = "--enable-cache-report"
    ready_paths = ("/health_generate",)
    metric_names = (GEN_TOKENS, VERIFY_CALLS)
    generated_counter = GEN_TOKENS

    sampling_keys = ("temperature", "top_p", "top_k", "min_p")  # native sampling_params

    def build_request(self, prompt: Prompt, max_tokens: int, model: str | None,
                      sampling: Sampling = GREEDY) -> tuple[str, RequestBody]:
        if prompt.messages is not None:
            path, body = super().build_request(prompt, max_tokens, model, sampling)
            body["stream_options"]["continuous_usage_stats"] = True
            body["return_spec_tokens_details"] = True
            return path, body
        return "/generate", {
            "text": prompt.text,
            "sampling_params": {"max_new_tokens": max_tokens, "min_new_tokens": max_tokens,
                                **self.sampling_fields(sampling), "ignore_eos": True},
            "stream": True,
        }

    def event_tokens(self, obj: Any, state: StreamState) -> int:
        meta = obj.get("meta_info")
        if isinstance(meta, dict) and "completion_tokens" in meta:  # cumulative on /generate
            total = int(meta["completion_tokens"])
            new = total - state.cumulative_tokens
            state.cumulative_tokens = total
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
                if isinstance(meta.get("first_token_latency"), (int, float)):  # from arrival
                    record = replace(record, server_ttft_s=float(meta["first_token_latency"]))
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

    def served_from_launch(self, argv: list[str]) -> Served:
        if not runs(argv, "sglang"):
            return Served()  # a wrapper: its flags are not the server's to read
        return Served.of(_sglang_values({k.lstrip("-").replace("-", "_"): v for k, v in
                                         _flag_pairs(argv, SGLANG_FLAGS).items()}, "launch: "))

    def served_from_server(self, endpoint: Endpoint, info: ServerInfo) -> Served:
        server = endpoint.get_json("/server_info") or endpoint.get_json("/get_server_info") or {}
        return Served.of(_sglang_values(server, "/server_info ")) if server else Served()

    def info(self, endpoint: Endpoint) -> ServerInfo:
        server = endpoint.get_json("/server_info") or endpoint.get_json("/get_server_info") or {}
        spec = {k: v for k, v in server.items() if k.startswith("speculative_") and v is not None}
        return with_info(super().info(endpoint), server.get("version"), spec)


SGLANG_METHODS = {"nextn": "mtp", "eagle": "eagle", "eagle3": "eagle3", "ngram": "ngram",
                  "lookahead": "ngram", "standalone": "draft"}
SGLANG_FLAGS = ("--speculative-algorithm", "--speculative-num-steps",
                "--speculative-num-draft-tokens", "--tp-size", "--tp", "--dtype",
                "--max-running-requests", "--disable-cuda-graph", "--pp-size", "--pp",
                "--ep-size", "--ep", "--dp-size", "--dp", "--enable-dp-attention")
SHORT_FLAGS = {"--tp": "--tp-size", "--pp": "--pp-size", "--ep": "--ep-size", "--dp": "--dp-size"}


def _flag_pairs(argv: list[str], flags: tuple[str, ...]) -> dict[str, object]:
    out: dict[str, object] = {}
    for flag in flags:
        if flag in ("--disable-cuda-graph", "--enable-dp-attention"):
            if flag in argv:
                out[flag] = True
            continue
        found = flag_value(argv, flag)
        if found:
            out[SHORT_FLAGS.get(flag, flag)] = found[0]
    return out


def _sglang_values(server: dict[str, object], prefix: str) -> dict[str, tuple[object, str]]:
    """SGLang's server args (from /server_info, or the launch flags as the same names)."""
    def num(key: str) -> int | None:
        value = server.get(key)
        return int(value) if isinstance(value, (int, str)) and str(value).isdigit() else None

    out: dict[str, tuple[object, str]] = {}
    algorithm = server.get("speculative_algorithm")
    if isinstance(algorithm, str) and algorithm:
        out["speculative"] = (True, f"{prefix}speculative_algorithm {algorithm}")
        out["method"] = (SGLANG_METHODS.get(algorithm.lower(), algorithm.lower()),
                         f"{prefix}speculative_algorithm {algorithm}")
    elif "speculative_algorithm" in server or prefix.startswith("launch"):
        out["speculative"] = (False, f"{prefix}speculative_algorithm {algorithm}"
                              if not prefix.startswith("launch") else
                              "launch: no --speculative-algorithm")
    for key, name, shift in (("speculative_num_steps", "draft_steps", 0),
                             ("speculative_num_draft_tokens", "draft_tokens", -1),  # + the root
                             ("tp_size", "tp_size", 0), ("max_running_requests", "slots", 0),
                             ("pp_size", "pp_size", 0), ("ep_size", "ep_size", 0),
                             ("dp_size", "dp_size", 0)):
        n = num(key)
        if n is not None:
            out[name] = (n + shift, f"{prefix}{key} {n}")
        elif prefix.startswith("launch") and key in ("tp_size", "pp_size", "ep_size"):
            out[name] = (1, f"launch: no --{key.replace('_', '-')}")  # SGLang's default
    attention = server.get("enable_dp_attention")
    if isinstance(attention, bool):
        out["dp_attention"] = (attention, f"{prefix}enable_dp_attention {attention}")
    elif prefix.startswith("launch"):
        out["dp_attention"] = (False, "launch: no --enable-dp-attention")
    if server.get("disable_cuda_graph") is True:
        out["eager"] = (True, f"{prefix}disable_cuda_graph")
    dtype = server.get("dtype")
    if isinstance(dtype, str) and dtype not in ("auto", ""):
        out["dtype"] = (dtype, f"{prefix}dtype {dtype}")
    return out
