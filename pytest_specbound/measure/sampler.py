"""Warm-up, then one request at a time until the stopping rule says stop; aggregates as ratios."""

from __future__ import annotations

import collections
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Protocol

from pytest_specbound import interrupts
from pytest_specbound.errors import ConfigError, RequestError
from pytest_specbound.measure.measurement import Measurement, Stop
from pytest_specbound.serving.backends.base import (
    GREEDY,
    Backend,
    Prompt,
    Sampling,
    SamplingError,
    burst_accept,
    merged_decode_tokens,
)
from pytest_specbound.serving.prometheus import counter_delta
from pytest_specbound.serving.records import RequestRecord, ServerInfo
from pytest_specbound.serving.stream_result import StreamResult
from pytest_specbound.serving.transport import ConnectFailed, Endpoint, RequestBody

DEFAULT_MAX_ACCEPT = 8  # tokens one verify step may emit, where the speculation is not known
LOOPBACK_FLOOR_S = 20e-6  # no server answers a request faster than a loopback round trip


class StoppingRule(Protocol):
    @property
    def sample_budget(self) -> int:
        """The most requests the rule counts (also how many untimed ones may be retried)."""

    def stop_reason(self, m: Measurement) -> tuple[Stop, str] | None:
        """Why to stop now (the reason and a sentence), or None to keep sampling."""

    def looks_at(self, n: int) -> bool:
        """Whether :meth:`stop_reason` judges the figures at ``n`` counted requests (where the
        accept length must be current); failures and budgets stop it at any count."""


@dataclass(frozen=True)
class FixedCount:
    """Stop after ``n`` counted requests (failed ones included: they are results too)."""

    n: int

    @property
    def sample_budget(self) -> int:
        return self.n

    def stop_reason(self, m: Measurement) -> tuple[Stop, str] | None:
        return (Stop.FIXED_COUNT, f"fixed count of {self.n} requests") \
            if len(m.records) >= self.n else None

    def looks_at(self, n: int) -> bool:
        return n >= self.n


def server_chunk(record: RequestRecord, max_accept: int) -> int | None:
    """The most tokens one event of the server can carry, where its events carry more than one
    verify step emits (a stream interval: vLLM and SGLang ``--stream-interval``, TensorRT-LLM
    ``stream_interval``; a gateway that coalesces), else None.

    The evidence is the server's own framing as the client received it: at least two decode
    reads that each brought exactly one event, one of them with more than ``max_accept`` tokens.
    An interval of N tokens sends when N have gathered, so an event carries N up to
    N + ``max_accept`` - 1 (N: the smallest such event). A client that fell behind merges several
    events into one read instead; a response buffered whole arrives in one read (no evidence
    either way, so the verify step stays the unit).
    """
    if not record.chunk_reads:
        return None
    first = record.chunk_reads[0]
    decode = [(n, r) for n, r in zip(record.chunk_tokens, record.chunk_reads, strict=True)
              if r != first]
    events_in = collections.Counter(r for _n, r in decode)
    alone = [n for n, r in decode if events_in[r] == 1]
    if len(alone) < 2 or max(alone) <= max_accept:
        return None
    full = [n for n in alone[:-1] if n > 1] or alone  # the last event carries what was left
    return max(max(alone), min(full) + max_accept - 1)


def untimed_reason(record: RequestRecord, max_accept: int) -> str | None:
    """Why the client's clock cannot time ``record``, or None when its timing is possible.

    A read is stamped with the arrival of its newest bytes, and the decode is timed from the
    first token's read to the last read (:func:`decode_seconds`). Where the kernel stamped every
    read, a client that fell behind mid-stream merges reads without moving either end: only a
    first read that also brought most of the decode leaves too little after it to time. Where
    the reader stamped them, a late reader moves the ends too: then more decode tokens per read
    than the server writes at once (one verify step, ``max_accept``, or one event of its stream
    interval, :func:`server_chunk`) means the client was not running while the server streamed.
    """
    if record.ttft_s < LOOPBACK_FLOOR_S and record.completion_tokens:
        return (f"TTFT {record.ttft_s * 1e3:.3f} ms is under the loopback floor "
                f"({LOOPBACK_FLOOR_S * 1e3:.2f} ms): the send was stamped late")
    tokens, reads = record.decode_tokens, record.decode_reads
    if tokens <= 0:
        return None
    burst = "the client was not running while the server streamed, or the server sent its " \
            "stream in one burst"
    if record.kernel_stamped:
        after = tokens - merged_decode_tokens(record.chunk_tokens, record.chunk_reads)
        if 2 * after < tokens:
            return (f"{tokens - after} of {tokens} decode tokens arrived in the first token's "
                    f"socket read, {after} after it: too few to time the decode from; {burst}")
        return None
    chunk = record.tokens_per_event
    if tokens > reads * max(max_accept, chunk or 0):
        per = (f"at most {chunk} per event of the server's stream interval" if chunk else
               f"at most {max_accept} per verify step")
        return (f"{tokens} decode tokens arrived in {reads} socket read{'s' * (reads != 1)} "
                f"after the first token ({per}): {burst}")
    return None


class Sampler:
    """Sends one request and turns the stream into a record with the best accept source."""

    def __init__(self, endpoint: Endpoint, backend: Backend, model: str | None = None,
                 max_accept: int = DEFAULT_MAX_ACCEPT, counters_per_request: bool = True,
                 sampling: Sampling = GREEDY, drafting: bool | None = None,
                 metrics_endpoint: Endpoint | None = None) -> None:
        self.endpoint = endpoint
        # where the counters are read: the server itself (the decode side behind a router)
        self.metrics_endpoint = metrics_endpoint or endpoint
        self.sampling = sampling
        self.drafting = drafting  # the server said it speculates (its settings, its launch)
        self.backend = backend
        self.model = model
        self.max_accept = max(1, max_accept)
        # scrape counters around each request until one shows the server reports all we need;
        # never under concurrency (other requests move the counters: see measure.load)
        self.counters_needed = counters_per_request

    def _scrape_if_needed(self) -> dict[str, float] | None:
        return self._scrape() if self.counters_needed else None

    def _scrape(self) -> dict[str, float] | None:
        try:
            return self.backend.scrape(self.metrics_endpoint)
        except RequestError:
            return None

    def one(self, prompt: Prompt, max_tokens: int) -> RequestRecord:
        try:
            if prompt.follow_ups:  # earlier turns replayed with the server's own answers
                prompt = self._replayed(prompt, prompt.max_tokens or max_tokens)
            path, body = self.backend.build_request(prompt, prompt.max_tokens or max_tokens,
                                                    self.model, self.sampling)
        except SamplingError as exc:
            raise ConfigError(f"the class's sampling: {exc}") from None
        except RequestError as exc:
            return RequestRecord(error=f"an earlier turn: {exc}")
        before = self._scrape_if_needed()  # counters around a request: server clock, accept
        try:
            result = self._stream_with_retry(path, body)
            record = self.backend.parse(result)
        except RequestError as exc:
            return RequestRecord(error=str(exc))
        clock_in_fields = record.server_decode_s is not None  # before any counter deltas
        if self.drafting and record.accept_source != "server":
            undrafted = self.backend.undrafted_accept(record)
            if undrafted is not None:  # the server's word: nothing drafted, one token a step
                record = replace(record, accept_length=undrafted, accept_source="server")
        after = self._scrape() if before is not None else None
        delta = None
        if after is not None and before is not None:
            delta = after if self.backend.drains_metrics else counter_delta(before, after)
        if delta is not None:  # (None: a restart between the reads; the record keeps its own)
            record = self.backend.server_clock_from_deltas(delta, record)
            if record.accept_source != "server":
                accept = self.backend.accept_from_deltas(delta)
                if accept is not None:
                    record = replace(record, accept_length=accept, accept_source="metrics")
        record = replace(record, tokens_per_event=server_chunk(record, self.max_accept))
        if record.accept_source not in ("server", "metrics") and record.tokens_per_event is None \
                and self.max_accept > 1:
            # (events of a stream interval are not verify steps: no estimate from them; a server
            # that drafts nothing verifies one token a step: bursts there are the network's)
            estimate = burst_accept(record.chunk_times_s, record.decode_tokens,
                                    self.backend.chunks_are_steps)
            if estimate is not None:
                record = replace(record, accept_length=estimate, accept_source="estimate")
        if record.accept_source == "server" and clock_in_fields:
            self.counters_needed = False  # per-request fields carry both: no scrapes from now on
        record = replace(record, sent_s=result.sent_at)  # perf_counter; rebased by measure()
        problem = untimed_reason(record, self.max_accept)
        if problem and record.server_decode_s:  # the server timed it: use its clock, say so
            return replace(record, decode_s=record.server_decode_s, clock="server",
                           client_untimed=problem)
        return replace(record, untimed=problem)

    def _replayed(self, prompt: Prompt, max_tokens: int) -> Prompt:
        """The conversation up to its last user turn, each earlier turn answered by the server
        (unmeasured, whole): what a chat user's later turn is sent with."""
        assert prompt.messages is not None
        history = list(prompt.messages)
        for turn in prompt.follow_ups:
            path, body = self.backend.build_request(Prompt(messages=tuple(history)), max_tokens,
                                                    self.model, self.sampling)
            body = {k: v for k, v in body.items() if k != "stream_options"} | {"stream": False}
            answer = self.endpoint.post_json(path, body)
            try:
                text = answer["choices"][0]["message"]["content"] or ""
            except (KeyError, IndexError, TypeError):
                raise RequestError(f"POST {path}: no choices[0].message.content") from None
            history += [{"role": "assistant", "content": text}, {"role": "user", "content": turn}]
        return Prompt(messages=tuple(history), max_tokens=prompt.max_tokens,
                      category=prompt.category)

    def _stream_with_retry(self, path: str, body: RequestBody) -> StreamResult:
        try:
            return self.endpoint.stream(path, body)
        except ConnectFailed:
            time.sleep(0.5)  # nothing was sent: one bounded retry is safe (a started stream
            return self.endpoint.stream(path, body)  # is never replayed: that hides a failure)


class Collector:
    """The records of one level as they arrive: counted (timed or failed), untimed (retried),
    drained (finished after the rule stopped), with send times on the level's clock."""

    def __init__(self, backend: str, rule: StoppingRule, warmup: int, max_untimed: int | None,
                 info: ServerInfo | None, concurrency: int = 1) -> None:
        self.backend = backend
        self.warmup = warmup
        self.allowance = rule.sample_budget if max_untimed is None else max_untimed
        self.info = info or ServerInfo()
        self.concurrency = concurrency
        self.origin = time.perf_counter()  # the level's clock starts when counting does
        self.records: list[RequestRecord] = []
        self.untimed: list[RequestRecord] = []
        self.drained: list[RequestRecord] = []
        self.window_accept: float | None = None
        self.window_counters = False  # True: counters give the accept; drop stream estimates
        self.counters_restarted = False  # the window's counters went down (a server restart)

    def start(self) -> None:
        self.origin = time.perf_counter()

    def _on_level_clock(self, record: RequestRecord) -> RequestRecord:
        sent = None if record.sent_s is None else record.sent_s - self.origin
        return replace(record, sent_s=sent, concurrency=self.concurrency)

    def add(self, record: RequestRecord) -> tuple[Stop, str] | None:
        """Count ``record`` (or keep it apart as untimed); a stop when untimed ones are too many."""
        record = self._on_level_clock(record)
        if self.window_counters and record.accept_source == "estimate":
            record = replace(record, accept_length=None, accept_source="none")
        if record.ok and record.untimed:
            self.untimed.append(record)
            if len(self.untimed) > self.allowance:
                return Stop.UNTIMED, self.now().untimed_note() or ""
            return None
        self.records.append(record)
        return None

    @property
    def received_tokens(self) -> int:
        """Tokens of every request that finished since counting began (counted or not)."""
        return sum(r.completion_tokens for r in (*self.records, *self.untimed, *self.drained))

    @property
    def wants_window_accept(self) -> bool:
        """Counters give the accept: no counted request carries a figure of its own."""
        return self.window_counters and not any(r.accept_length for r in self.records if r.ok)

    def drain(self, record: RequestRecord) -> None:
        self.drained.append(self._on_level_clock(record))

    def now(self, stop: Stop | None = None, stopped: str = "",
            interrupted: bool = False) -> Measurement:
        return Measurement(self.backend, tuple(self.records), self.warmup, stopped, stop, self.info,
                           interrupted, tuple(self.untimed), self.allowance, self.concurrency,
                           tuple(self.drained), self.window_accept,
                           counters_restarted=self.counters_restarted)


def requests_sent(samples: int, concurrency: int, warmup: int) -> int:
    """The most prompts one measurement sends: its counted samples, and each stream's warm-up
    requests plus the one it may have in flight when sampling stops."""
    return samples + concurrency * (warmup + 1)


@dataclass(frozen=True)
class Workload:
    """What to send: ``prompts`` round-robin, each up to ``max_tokens`` output tokens (a prompt's
    own length first), after ``warmup`` uncounted requests (per stream under concurrency)."""

    prompts: Sequence[Prompt]
    max_tokens: int
    warmup: int = 1


@dataclass(frozen=True)
class Stopping:
    """When to stop: when ``rule`` says so, past ``max_seconds`` of counting, or past
    ``max_untimed`` requests the client could not time (default: the rule's sample budget)."""

    rule: StoppingRule
    max_seconds: float | None = None
    max_untimed: int | None = None


def measure(
    sampler: Sampler,
    workload: Workload,
    stopping: Stopping,
    on_record: Callable[[Measurement], None] | None = None,
    info: ServerInfo | None = None,
) -> Measurement:
    """Run the warm-up's uncounted requests, then sample prompts round-robin until ``stopping``.

    One request at a time (:func:`pytest_specbound.measure.load.measure_closed_loop` keeps N in
    flight). ``on_record`` sees the measurement so far after every request. A request the client
    could not time is kept apart and retried; past ``stopping.max_untimed`` such requests
    sampling stops with :attr:`Stop.UNTIMED`. Ctrl-C ends sampling with
    :attr:`Stop.INTERRUPTED`: the measurement so far goes to ``on_record``, then the interrupt
    propagates.
    """
    rule, max_seconds = stopping.rule, stopping.max_seconds
    prompts, max_tokens, warmup = workload.prompts, workload.max_tokens, workload.warmup
    got = Collector(sampler.backend.name, rule, warmup, stopping.max_untimed, info)
    try:
        for i in range(warmup):
            sampler.one(prompts[i % len(prompts)], max_tokens)
        start = time.monotonic()
        got.start()
        i = 0
        while True:
            interrupts.check()
            reason = rule.stop_reason(got.now())
            if reason:
                return got.now(*reason).with_overlaps()
            if max_seconds is not None and time.monotonic() - start > max_seconds:
                return got.now(Stop.TIME_BUDGET, f"time budget of {max_seconds:g} s").with_overlaps()
            record = sampler.one(prompts[i % len(prompts)], max_tokens)
            i += 1
            stop = got.add(record)
            if stop:
                return got.now(*stop).with_overlaps()
            if on_record:
                on_record(got.now())
    except KeyboardInterrupt:
        if on_record:
            on_record(got.now(Stop.INTERRUPTED, "interrupted", interrupted=True).with_overlaps())
        raise
