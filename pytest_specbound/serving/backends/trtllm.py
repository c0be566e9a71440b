"""TensorRT-LLM ``trtllm-serve``: ``avg_decoded_tokens_per_iter``; JSON iteration stats."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

from pytest_specbound.serving.backends.base import GREEDY, Backend, Sampling, with_info
from pytest_specbound.serving.records import RequestRecord, ServerInfo
from pytest_specbound.serving.settings import Served, flag_value, int_flag, runs
from pytest_specbound.serving.transport import Endpoint, RequestBody

# speculative_config.decoding_type -> budget method (PARD and SA have no budget method)
TRT_METHODS = {"mtp": "mtp", "eagle3": "eagle3", "eagle": "eagle3", "ngram": "ngram",
               "drafttarget": "draft", "dflash": "dflash"}
ACCEPTED = "numAcceptedTokens"
WITH_DRAFT = "numRequestsWithDraftTokens"


def speculative_config(text: str) -> dict[str, str]:
    """The ``speculative_config:`` block of a trtllm-serve ``--config`` YAML as flat
    ``key: value`` strings (the subset its documented examples use; nested values are skipped)."""
    block: dict[str, str] = {}
    inside, indent = False, 0
    for raw in text.splitlines():
        line = raw.split("#", 1)[0].rstrip()
        if not line.strip():
            continue
        depth = len(line) - len(line.lstrip())
        if not inside:
            inside = line.strip() == "speculative_config:" and depth == 0
            continue
        if depth == 0:
            break
        indent = indent or depth
        key, colon, value = line.strip().partition(":")
        if colon and depth == indent and value.strip():
            block[key.strip()] = value.strip().strip("'\"")
    return block


class TRTLLM(Backend):
    name = "trtllm"
    batching_setting = "--max_batch_size"
    ready_paths = ("/health",)
    metric_names = (ACCEPTED, WITH_DRAFT)
    drains_metrics = True  # GET /metrics empties the iteration-stats queue

    def served_from_launch(self, argv: list[str]) -> Served:
        """``trtllm-serve`` flags and the ``speculative_config`` of its ``--config`` YAML
        (``--extra_llm_api_options``): the server reports neither."""
        values: dict[str, tuple[object, str]] = {
            "tp_size": int_flag(argv, "--tp_size", "--tensor_parallel_size"),
            "slots": int_flag(argv, "--max_batch_size"),
            "pp_size": int_flag(argv, "--pp_size", "--pipeline_parallel_size"),
            "ep_size": int_flag(argv, "--ep_size", "--moe_expert_parallel_size"),
        }
        if runs(argv, "trtllm-serve"):  # its defaults where the launch leaves them out (its
            # expert-parallel default follows the model and TP: left unknown)
            for key, flag in (("tp_size", "--tp_size"), ("pp_size", "--pp_size")):
                if values[key][0] is None:
                    values[key] = (1, f"launch: no {flag}")
        config = flag_value(argv, "--config", "--extra_llm_api_options")
        spec: dict[str, str] = {}
        if config:
            try:
                spec = speculative_config(Path(config[0]).read_text(encoding="utf-8"))
            except OSError:  # a file on another machine: the launch cannot tell
                return Served.of(values)
        where = f"{config[0]}: speculative_config" if config else ""
        if spec.get("decoding_type"):
            values["speculative"] = (True, f"{where}.decoding_type")
            method = TRT_METHODS.get(spec["decoding_type"].lower())
            if method:
                values["method"] = (method, f"{where}.decoding_type {spec['decoding_type']}")
            steps = spec.get("max_draft_len") or spec.get("num_nextn_predict_layers")
            if steps and steps.isdigit():
                values["draft_steps"] = (int(steps), f"{where}: {steps} draft tokens")
        elif config or runs(argv, "trtllm-serve"):
            values["speculative"] = (False, f"{where} absent" if config else "launch: no --config")
        return Served.of(values)

    sampling_keys = ("temperature", "top_p", "top_k", "seed")  # extra="forbid": no min_p

    def build_request(self, prompt: Any, max_tokens: int, model: str | None,
                      sampling: Sampling = GREEDY) -> tuple[str, RequestBody]:
        path, body = super().build_request(prompt, max_tokens, model, sampling)
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
