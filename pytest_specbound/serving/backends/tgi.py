"""Hugging Face TGI: ``/generate_stream`` (one event per token), skipped-tokens histogram."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from pytest_specbound.serving.backends.base import GREEDY, Backend, Prompt, Sampling, StreamState
from pytest_specbound.serving.records import RequestRecord, ServerInfo
from pytest_specbound.serving.settings import Served, flag_value, int_flag, runs
from pytest_specbound.serving.transport import Endpoint, RequestBody

SKIPPED_SUM = "tgi_request_skipped_tokens_sum"
SKIPPED_COUNT = "tgi_request_skipped_tokens_count"


class TGI(Backend):
    name = "tgi"
    batching_setting = "--max-batch-size / --max-concurrent-requests"
    ready_paths = ("/health",)
    metric_names = (SKIPPED_SUM, SKIPPED_COUNT)
    chunks_are_steps = False

    def served_from_launch(self, argv: list[str]) -> Served:
        """``text-generation-launcher`` flags: its ``/info`` has no speculative field. With
        ``--speculate N`` it drafts N tokens (Medusa heads when the model has them, else n-gram:
        the method is not told by the flags)."""
        values: dict[str, tuple[object, str]] = {
            "tp_size": int_flag(argv, "--num-shard"),
            "slots": int_flag(argv, "--max-batch-size"),
        }
        steps, where = int_flag(argv, "--speculate")
        if steps:
            values.update(speculative=(True, where), draft_steps=(steps, where))
        elif runs(argv, "text-generation-launcher"):
            values["speculative"] = (False, "launch: no --speculate")
        dtype = flag_value(argv, "--dtype")
        if dtype:
            values["dtype"] = (dtype[0], f"launch: {dtype[1]}")
        return Served.of(values)

    sampling_keys = ("temperature", "top_p", "top_k", "seed")

    def build_request(self, prompt: Prompt, max_tokens: int, model: str | None,
                      sampling: Sampling = GREEDY) -> tuple[str, RequestBody]:
        if prompt.messages is not None:
            return super().build_request(prompt, max_tokens, model, sampling)
        # TGI has no ignore_eos / min_tokens: an early EOS shortens the request (noted per record)
        fields = self.sampling_fields(sampling)
        if sampling.greedy:  # its temperature must be > 0: greedy is do_sample = false
            fields = {k: v for k, v in fields.items() if k != "temperature"}
        return "/generate_stream", {
            "inputs": prompt.text,
            "parameters": {"max_new_tokens": max_tokens, "do_sample": not sampling.greedy,
                           "details": True, **fields},
        }

    def extra_fields(self, max_tokens: int) -> RequestBody:
        return {}

    def event_tokens(self, obj: Any, state: StreamState) -> int:
        if isinstance(obj.get("token"), dict):
            return 0 if obj["token"].get("special") else 1
        return super().event_tokens(obj, state)

    def is_final(self, obj: Any) -> bool:
        return obj.get("details") is not None or super().is_final(obj)

    def server_fields(self, events: list[tuple[float, Any]], record: RequestRecord) -> RequestRecord:
        for _, o in events:
            details = o.get("details") if isinstance(o, dict) else None
            if isinstance(details, dict) and "generated_tokens" in details:
                record = replace(record, completion_tokens=int(details["generated_tokens"]),
                                 server={"details": details})
        return record

    def accept_from_deltas(self, delta: dict[str, float], requests: int = 1) -> float | None:
        # one observation per generation step, the prefill step included (it records 0):
        # each request in the window adds exactly one prefill observation, left out here
        steps = delta.get(SKIPPED_COUNT, 0.0) - requests
        return 1 + delta.get(SKIPPED_SUM, 0.0) / steps if steps > 0 else None

    def info(self, endpoint: Endpoint) -> ServerInfo:
        data = endpoint.get_json("/info") or {}
        model, version = data.get("model_id"), data.get("version")
        return ServerInfo(models=(str(model),) if model else (),
                          version=str(version) if version is not None else None)
