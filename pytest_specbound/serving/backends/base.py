"""The backend interface: build a deterministic request, read the stream, find accept stats."""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from pytest_specbound.serving.prometheus import counter_totals
from pytest_specbound.serving.records import RequestRecord, ServerInfo
from pytest_specbound.serving.settings import Served, argv_of
from pytest_specbound.serving.stream_result import StreamResult
from pytest_specbound.serving.transport import Endpoint, RequestBody


@dataclass(frozen=True)
class Prompt:
    """A prompt as text or chat messages, with an optional output length of its own."""

    text: str | None = None
    messages: tuple[dict[str, str], ...] | None = None
    max_tokens: int | None = None
    follow_ups: tuple[str, ...] = ()  # later user turns: earlier ones replayed, the last measured
    category: str | None = None  # a prompt set's category (MT-bench's writing, coding, ...)


SAMPLING_KEYS = ("temperature", "top_p", "top_k", "min_p", "seed")


@dataclass(frozen=True)
class Sampling:
    """How tokens are chosen: greedy (temperature 0) unless a class says otherwise. Only the
    fields given are sent, in each server's own request fields."""

    temperature: float = 0.0
    top_p: float | None = None
    top_k: int | None = None
    min_p: float | None = None
    seed: int | None = None

    @property
    def greedy(self) -> bool:
        return self.temperature <= 0

    def given(self) -> dict[str, float | int]:
        """The fields to send: the temperature always, the others where set."""
        return {k: v for k in SAMPLING_KEYS if (v := getattr(self, k)) is not None}


GREEDY = Sampling()


class SamplingError(ValueError):
    """A sampling field this server's request has no place for."""


@dataclass
class StreamState:
    """What a stream's parser carries from one event to the next."""

    cumulative_tokens: int = 0  # the last cumulative completion-token count an event gave


class Backend:
    """Defaults are OpenAI-compatible; server families override what differs."""

    name = "openai"
    ready_paths: tuple[str, ...] = ("/health",)
    models_path = "/v1/models"
    metrics_path: str | None = "/metrics"
    metric_names: tuple[str, ...] = ()  # counters whose deltas give the accept length
    generated_counter: str | None = None  # of metric_names, the one counting generated tokens
    chunks_are_steps = True  # one SSE chunk per verify step (stream_interval 1)
    drains_metrics = False  # True where reading the metrics resets them
    batching_setting: str | None = None  # the server flag that caps concurrent sequences
    # the flag that makes the server report its prompt cache's hits per request (None: it always
    # does, or cannot): without them other requests' prefill is left out of a level's floor
    cached_tokens_setting: str | None = None

    # -- request -------------------------------------------------------------------------
    sampling_keys: tuple[str, ...] = SAMPLING_KEYS  # what its text route takes

    def sampling_fields(self, sampling: Sampling) -> RequestBody:
        """``sampling`` as this server's request fields (an unknown one: :class:`SamplingError`)."""
        fields = sampling.given()
        unknown = [k for k in fields if k not in self.sampling_keys]
        if unknown:
            raise SamplingError(f"{unknown[0]} is not a {self.name} request field; valid: "
                                f"{', '.join(self.sampling_keys)}")
        return fields

    def build_request(self, prompt: Prompt, max_tokens: int, model: str | None,
                      sampling: Sampling = GREEDY) -> tuple[str, RequestBody]:
        body: RequestBody = {
            "max_tokens": max_tokens,
            "stream": True,
            "stream_options": {"include_usage": True},
            **self.sampling_fields(sampling),
            **self.extra_fields(max_tokens),
        }
        if model:
            body["model"] = model
        if prompt.messages is not None:
            body["messages"] = list(prompt.messages)
            return "/v1/chat/completions", body
        body["prompt"] = prompt.text
        return "/v1/completions", body

    def extra_fields(self, max_tokens: int) -> RequestBody:
        """Fields that force a fixed-length greedy decode on this server."""
        return {"ignore_eos": True, "min_tokens": max_tokens}

    # -- stream --------------------------------------------------------------------------
    def event_tokens(self, obj: Any, state: StreamState) -> int:
        """Tokens carried by one event (exact where the server gives ids or cumulative usage)."""
        choices = obj.get("choices") or []
        if not choices:
            return 0
        c = choices[0]
        ids = c.get("token_ids")
        if isinstance(ids, list):
            return len(ids)
        usage = obj.get("usage")
        if isinstance(usage, dict) and "completion_tokens" in usage:  # continuous usage stats
            total = int(usage["completion_tokens"])
            new = total - state.cumulative_tokens
            state.cumulative_tokens = total
            return max(new, 0)
        text = c.get("text")
        if text is None:
            text = (c.get("delta") or {}).get("content")
        return 1 if text else 0

    def is_final(self, obj: Any) -> bool:
        return bool(obj.get("usage")) and not obj.get("choices")

    def server_fields(self, events: list[tuple[float, Any]], record: RequestRecord) -> RequestRecord:
        """``record`` with the server's timings and accept stats from the stream (default: none)."""
        return record

    def parse(self, result: StreamResult) -> RequestRecord:
        times: list[float] = []
        tokens: list[int] = []
        chunk_reads: list[int] = []
        prompt_tokens: int | None = None
        cached: int | None = None
        completion_tokens = 0
        state = StreamState()
        final = result.done
        reads = result.read_of_event or [0] * len(result.events)
        for (t, obj), read_no in zip(result.events, reads, strict=True):
            if not isinstance(obj, dict):
                continue
            n = self.event_tokens(obj, state)
            if n > 0:
                times.append(t)
                tokens.append(n)
                chunk_reads.append(read_no)
            usage = obj.get("usage")
            if isinstance(usage, dict):
                prompt_tokens = usage.get("prompt_tokens", prompt_tokens)
                details = usage.get("prompt_tokens_details")
                if isinstance(details, dict) and isinstance(details.get("cached_tokens"), int):
                    cached = details["cached_tokens"]
                if "completion_tokens" in usage:
                    completion_tokens = int(usage["completion_tokens"])
            final = final or self.is_final(obj)
        if not final:
            from pytest_specbound.errors import RequestError

            raise RequestError(
                f"truncated stream: ended after {len(result.events)} events without the final one"
            )
        completion = completion_tokens or sum(tokens)
        record = RequestRecord(
            prompt_tokens=prompt_tokens, completion_tokens=completion, cached_prompt_tokens=cached,
            ttft_s=times[0] if times else 0.0,
            decode_s=decode_seconds(times, tokens, chunk_reads, completion - 1),
            chunk_times_s=tuple(times), chunk_tokens=tuple(tokens), chunk_reads=tuple(chunk_reads),
            kernel_stamped=result.kernel_stamped)
        return self.server_fields(result.events, record)

    # -- accept fallbacks ----------------------------------------------------------------
    def scrape(self, endpoint: Endpoint) -> dict[str, float] | None:
        """Counter totals from the metrics endpoint, or None when there are none."""
        if not self.metrics_path or not self.metric_names:
            return None
        status, body = endpoint.get(self.metrics_path)
        if status != 200:
            return None
        totals = counter_totals(body.decode("utf-8", "replace"), self.metric_names)
        return totals if totals else None

    def undrafted_accept(self, record: RequestRecord) -> float | None:
        """1.0 where the server's own fields say this request drafted nothing (on a server
        that speculates: each step then verified one token); None where they cannot say."""
        return None

    def accept_from_deltas(self, delta: dict[str, float], requests: int = 1) -> float | None:
        """Accept length from counter deltas over a window that covers ``requests`` requests
        (one at concurrency 1; every request of a level's window at higher concurrency)."""
        return None

    def server_clock_from_deltas(self, delta: dict[str, float], record: RequestRecord) -> RequestRecord:
        """``record`` with the server's decode time from counter deltas, where the server has no
        per-request field for it (default: unchanged)."""
        return record

    # -- settings ------------------------------------------------------------------------
    def served_from_launch(self, argv: list[str]) -> Served:
        """What the launch command tells of the server's settings (default: nothing)."""
        return Served()

    def served_from_server(self, endpoint: Endpoint, info: ServerInfo) -> Served:
        """What the server reports of its settings (default: nothing)."""
        return Served()

    def served(self, endpoint: Endpoint, info: ServerInfo, launch: str | None) -> Served:
        """The server's settings: what it reports, its launch command where it does not."""
        return self.served_from_server(endpoint, info).over(
            self.served_from_launch(argv_of(launch)))

    # -- identity ------------------------------------------------------------------------
    def info(self, endpoint: Endpoint) -> ServerInfo:
        """Server version, model ids and speculative settings, where the server exposes them."""
        return ServerInfo(models=self.served_models(endpoint))

    def served_models(self, endpoint: Endpoint) -> tuple[str, ...]:
        models = endpoint.get_json(self.models_path) or {}
        return tuple(str(m["id"]) for m in models.get("data", [])
                     if isinstance(m, dict) and m.get("id"))


def with_info(info: ServerInfo, version: Any = None, speculative: Any = None,
              model_path: Any = None) -> ServerInfo:
    """``info`` with the fields a server reported (None and empty values left out)."""
    return replace(info, version=str(version) if version is not None else None,
                   speculative=dict(speculative) if speculative else None,
                   model_path=str(model_path) if model_path else None)


def decode_seconds(times: Sequence[float], tokens: Sequence[int], reads: Sequence[int],
                   decode_tokens: int) -> float:
    """First token to last, as a decode time for all ``decode_tokens``.

    A read is stamped with the arrival of its newest bytes. When the first token's read also
    brought decode tokens (the reader ran late), its stamp is theirs, not the first token's:
    then the rate is taken from the tokens after that read over the time after it, and the
    decode time is that rate's time for every decode token (so tokens / time stays the rate).
    """
    if not times:
        return 0.0
    span = times[-1] - times[0]
    merged = merged_decode_tokens(tokens, reads)
    after = decode_tokens - merged
    if merged <= 0 or after <= 0 or span <= 0:
        return span
    return span * decode_tokens / after


def merged_decode_tokens(tokens: Sequence[int], reads: Sequence[int]) -> int:
    """Decode tokens that came in the first token's socket read (0 when it brought only that)."""
    if not reads:
        return 0
    return max(0, sum(n for n, r in zip(tokens, reads, strict=False) if r == reads[0]) - 1)


def tokens_per_forward(decode_tokens: float, accepted_drafts: float,
                       drafting_rounds: float = 0.0) -> float | None:
    """Accept length as the roofline needs it: decode tokens over target forwards.

    Every target forward emits exactly one token that is not an accepted draft (the bonus or the
    correction), so forwards = decode tokens - accepted drafts; a forward with no draft counts 1.
    But the last round may be cut by ``max_tokens`` after its drafts were counted as accepted
    (vLLM counts them: 56 accepted over 8 rounds for 63 decode tokens), so where the server
    counts its ``drafting_rounds`` there were at least that many forwards.
    """
    forwards = max(decode_tokens - accepted_drafts, drafting_rounds)
    return decode_tokens / forwards if forwards > 0 else None


def burst_accept(times: Sequence[float], decode_tokens: int, chunks_are_steps: bool) -> float | None:
    """Estimate tokens per verify step from the stream alone (flagged as an estimate).

    Where each chunk is one verify step, it is tokens per chunk after the first. Where the server
    sends one event per token, a verify step shows as a burst of near-simultaneous events: gaps
    shorter than a quarter of the 90th-percentile gap join a burst.
    """
    if len(times) < 3:
        return None
    if chunks_are_steps:
        return decode_tokens / (len(times) - 1)
    gaps = sorted(b - a for a, b in itertools.pairwise(times))
    threshold = 0.25 * gaps[int(0.9 * (len(gaps) - 1))]
    steps = sum(1 for a, b in itertools.pairwise(times) if b - a > threshold)
    return decode_tokens / steps if steps else None
