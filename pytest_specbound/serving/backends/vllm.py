"""vLLM: OpenAI API with ``return_token_ids``; per-request spec metrics on the last usage chunk."""

from __future__ import annotations

import re
from dataclasses import replace
from typing import Any

from pytest_specbound.serving.backends.base import Backend, tokens_per_forward, with_info
from pytest_specbound.serving.records import RequestRecord, ServerInfo
from pytest_specbound.serving.settings import (
    Served,
    flag_value,
    has_flag,
    int_flag,
    json_flag,
    runs,
)
from pytest_specbound.serving.transport import Endpoint, RequestBody

ACCEPTED = "vllm:spec_decode_num_accepted_tokens_total"
DRAFTS = "vllm:spec_decode_num_drafts_total"
GENERATED = "vllm:generation_tokens_total"
DECODE_SUM = "vllm:request_decode_time_seconds_sum"  # histogram: per-request decode time, summed


class VLLM(Backend):
    name = "vllm"
    batching_setting = "--max-num-seqs"
    cached_tokens_setting = "--enable-prompt-tokens-details"
    ready_paths = ("/health", "/v1/models")
    metric_names = (ACCEPTED, DRAFTS, GENERATED, DECODE_SUM)
    generated_counter = GENERATED

    def extra_fields(self, max_tokens: int) -> RequestBody:
        return {"ignore_eos": True, "min_tokens": max_tokens, "return_token_ids": True}

    def server_fields(self, events: list[tuple[float, Any]], record: RequestRecord) -> RequestRecord:
        metrics = next((o["metrics"] for _, o in reversed(events)
                        if isinstance(o, dict) and isinstance(o.get("metrics"), dict)), None)
        if metrics is None:
            return record
        changes: dict[str, Any] = {"server": {"metrics": metrics}}
        ttft_ms = metrics.get("time_to_first_token_ms")  # from scheduling; queue_time_ms before
        if isinstance(ttft_ms, (int, float)) and ttft_ms >= 0:
            queued = metrics.get("queue_time_ms")
            changes["server_ttft_s"] = (ttft_ms + (queued if isinstance(queued, (int, float))
                                                   else 0.0)) / 1e3
        gen_ms = metrics.get("generation_time_ms")
        if isinstance(gen_ms, (int, float)) and gen_ms > 0:
            changes.update(server_decode_s=gen_ms / 1e3,
                           server_decode_tok_s=record.decode_tokens / (gen_ms / 1e3))
        spec = metrics.get("speculative_decoding")
        if isinstance(spec, dict) and spec.get("num_accepted_draft_tokens") is not None:
            # vLLM's mean_acceptance_length averages over steps that drafted; the roofline needs
            # tokens per target forward (a forward that drafted nothing still reads every weight)
            accept = tokens_per_forward(record.decode_tokens, int(spec["num_accepted_draft_tokens"]),
                                        _number(spec.get("num_spec_steps")))
            if accept is not None:
                changes.update(accept_length=accept, accept_source="server")
        return replace(record, **changes)

    def accept_from_deltas(self, delta: dict[str, float], requests: int = 1) -> float | None:
        # same definition as the per-request field: decode tokens over target forwards
        if delta.get(DRAFTS, 0.0) <= 0:
            return None
        decode = delta.get(GENERATED, 0.0) - requests  # each request's first token is prefill
        return tokens_per_forward(decode, delta.get(ACCEPTED, 0.0), delta[DRAFTS])

    def server_clock_from_deltas(self, delta: dict[str, float], record: RequestRecord) -> RequestRecord:
        # the decode-time histogram's sum grows by exactly this request's decode time (one
        # request at a time: the measurement lock); per-request generation_time_ms wins if given
        seconds = delta.get(DECODE_SUM, 0.0)
        if record.server_decode_s is None and seconds > 0:
            return replace(record, server_decode_s=seconds,
                           server_decode_tok_s=record.decode_tokens / seconds)
        return record

    def served_from_launch(self, argv: list[str]) -> Served:
        spec, where = json_flag(argv, "--speculative-config", "--speculative_config")
        values: dict[str, tuple[object, str]] = {
            "tp_size": int_flag(argv, "-tp", "--tensor-parallel-size"),
            "slots": int_flag(argv, "--max-num-seqs"),
            "pp_size": int_flag(argv, "-pp", "--pipeline-parallel-size"),
            "dp_size": int_flag(argv, "-dp", "--data-parallel-size"),
        }
        values.update(_spec_values(spec, where))
        values.update(_parallel_values(argv, values))
        if not spec and runs(argv, "vllm.entrypoints", "vllm"):
            values["speculative"] = (False, "launch: no --speculative-config")
        eager = has_flag(argv, "--enforce-eager")
        if eager:
            values["eager"] = (True, f"launch: {eager}")
        dtype = flag_value(argv, "--dtype")
        if dtype and dtype[0] != "auto":
            values["dtype"] = (dtype[0], f"launch: {dtype[1]}")
        return Served.of(values)

    def served_from_server(self, endpoint: Endpoint, info: ServerInfo) -> Served:
        config = _server_config(endpoint)
        values = _config_values(config)
        spec = dict(info.speculative or {})
        if spec:
            values.update(_spec_values(spec, f"{SERVER_INFO} speculative_config"))
        return Served.of(values)

    def info(self, endpoint: Endpoint) -> ServerInfo:
        version = endpoint.get_json("/version") or {}
        config = _server_config(endpoint)
        spec = config.get("speculative_config") if isinstance(config, dict) else None
        return with_info(super().info(endpoint), version.get("version"),
                         spec if isinstance(spec, dict) else None)


SERVER_INFO = "/server_info"  # served with VLLM_SERVER_DEV_MODE=1 only


def _server_config(endpoint: Endpoint) -> dict[str, Any] | str | None:
    """vLLM's engine config from ``/server_info``: its JSON dump where the server takes
    ``config_format=json``, else the one-line text older servers give (None without dev mode)."""
    server = endpoint.get_json(f"{SERVER_INFO}?config_format=json")
    config = server.get("vllm_config") if isinstance(server, dict) else None
    return config if isinstance(config, (dict, str)) else None


_TEXT_SIZES = re.compile(r"\b(tensor|pipeline|data)_parallel_size=(\d+)")


def _config_values(config: dict[str, Any] | str | None) -> dict[str, tuple[object, str]]:
    """The layout vLLM runs, from its own config: TP, PP and DP sizes and expert parallelism
    (EP = TP x DP when enabled, its DP ranks then running attention each for their own
    sequences), and eager mode."""
    if isinstance(config, str):  # the text form names the three sizes, not expert parallelism
        sizes = {kind: int(n) for kind, n in _TEXT_SIZES.findall(config)}
        names = {"tensor": "tp_size", "pipeline": "pp_size", "data": "dp_size"}
        return {names[k]: (n, f"{SERVER_INFO} vllm_config {k}_parallel_size={n}")
                for k, n in sizes.items()}
    if not isinstance(config, dict):
        return {}
    parallel = config.get("parallel_config")
    out: dict[str, tuple[object, str]] = {}
    if isinstance(parallel, dict):
        where = f"{SERVER_INFO} parallel_config"
        sizes = {}
        for key, field in (("tp_size", "tensor_parallel_size"),
                           ("pp_size", "pipeline_parallel_size"),
                           ("dp_size", "data_parallel_size")):
            value = parallel.get(field)
            if isinstance(value, int) and not isinstance(value, bool) and value > 0:
                sizes[key] = value
                out[key] = (value, f"{where} {field} {value}")
        expert = parallel.get("enable_expert_parallel")
        if isinstance(expert, bool) and "tp_size" in sizes:
            tp, dp = sizes["tp_size"], sizes.get("dp_size", 1)
            said = f"{where} enable_expert_parallel {str(expert).lower()}"
            out["ep_size"] = (tp * dp if expert else 1, said)
            out["dp_attention"] = (expert and dp > 1, said + f", data_parallel_size {dp}")
            if expert:
                out["group_tp"] = (tp * dp, said + f" (TP {tp} x DP {dp})")
    model = config.get("model_config")
    if isinstance(model, dict) and model.get("enforce_eager") is True:
        out["eager"] = (True, f"{SERVER_INFO} model_config enforce_eager true")
    return out


VLLM_METHODS = {"ngram": "ngram", "eagle": "eagle", "eagle3": "eagle3", "mtp": "mtp",
                "deepseek_mtp": "mtp", "qwen3_next_mtp": "mtp", "draft_model": "draft",
                "medusa": "eagle"}


def _spec_values(spec: dict[str, object], where: str) -> dict[str, tuple[object, str]]:
    """vLLM's speculative_config as settings: method and num_speculative_tokens."""
    if not spec:
        return {}
    out: dict[str, tuple[object, str]] = {"speculative": (True, where)}
    method = spec.get("method")
    if isinstance(method, str):
        out["method"] = (VLLM_METHODS.get(method.lower(), method.lower()), f"{where} method {method}")
    n = spec.get("num_speculative_tokens")
    if isinstance(n, int):
        out["draft_steps"] = (n, f"{where} num_speculative_tokens {n}")
    return out


def _parallel_values(argv: list[str], values: dict[str, tuple[object, str]]
                     ) -> dict[str, tuple[object, str]]:
    """vLLM's expert parallelism: ``--enable-expert-parallel`` spreads the experts over TP x DP
    GPUs, and its data-parallel ranks then run attention each for their own sequences."""
    if not runs(argv, "vllm.entrypoints", "vllm"):
        return {}
    tp, dp = (int(str(values[k][0] or 1)) for k in ("tp_size", "dp_size"))
    flag = has_flag(argv, "--enable-expert-parallel")
    out: dict[str, tuple[object, str]] = {
        key: values[key] if values[key][0] else (1, f"launch: no {flag}")  # vLLM's defaults
        for key, flag in (("tp_size", "--tensor-parallel-size"),
                          ("pp_size", "--pipeline-parallel-size"))}
    if flag:
        out["ep_size"] = (tp * dp, f"launch: {flag} (EP = TP x DP)")
        out["dp_attention"] = (dp > 1, f"launch: {flag} with data-parallel size {dp}")
        out["group_tp"] = (tp * dp, f"launch: TP {tp} x DP {dp} under {flag}")
    else:
        out["ep_size"] = (1, "launch: no --enable-expert-parallel")
        out["dp_attention"] = (False, "launch: no --enable-expert-parallel")
    return out


def _number(value: object) -> float:
    """A count from vLLM's per-request metrics, 0 where absent (older versions)."""
    return float(value) if isinstance(value, (int, float)) else 0.0
