"""Warm-up, then one request at a time until the stopping rule says stop; aggregates as ratios."""

from __future__ import annotations

import enum
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from pytest_specbound.errors import RequestError
from pytest_specbound.serving.backends.base import Backend, Prompt, burst_accept
from pytest_specbound.serving.records import RequestRecord
from pytest_specbound.serving.transport import ConnectFailed, Endpoint

DEFAULT_MAX_ACCEPT = 8  # tokens one verify step may emit, where the speculation is not known
LOOPBACK_FLOOR_S = 20e-6  # no server answers a request faster than a loopback round trip
CLOCK_TOLERANCE = 0.05  # client and server decode rates further apart than this are flagged


class Stop(enum.Enum):
    """Why sampling stopped."""

    DECIDED = "decided"
    SAMPLE_BUDGET = "sample budget"
    FIXED_COUNT = "fixed count"
    TIME_BUDGET = "time budget"
    REQUEST_FAILED = "a request failed"
    UNTIMED = "too many requests could not be timed"
    INTERRUPTED = "interrupted"


class StoppingRule(Protocol):
    @property
    def sample_budget(self) -> int:
        """The most requests the rule counts (also how many untimed ones may be retried)."""

    def stop_reason(self, records: Sequence[RequestRecord]) -> tuple[Stop, str] | None:
        """Why to stop now (the reason and a sentence), or None to keep sampling."""


@dataclass(frozen=True)
class FixedCount:
    """Stop after ``n`` counted requests (failed ones included: they are results too)."""

    n: int

    @property
    def sample_budget(self) -> int:
        return self.n

    def stop_reason(self, records: Sequence[RequestRecord]) -> tuple[Stop, str] | None:
        return (Stop.FIXED_COUNT, f"fixed count of {self.n} requests") if len(records) >= self.n \
            else None


def untimed_reason(record: RequestRecord, max_accept: int) -> str | None:
    """Why the client's clock cannot time ``record``, or None when its timing is possible.

    One socket read can carry at most one verify step's tokens when the client keeps up; more
    decode tokens than ``max_accept`` per read means the client was not running while the server
    streamed (descheduled on a busy machine, or a server that flushed its stream in one burst).
    """
    if record.ttft_s < LOOPBACK_FLOOR_S and record.completion_tokens:
        return (f"TTFT {record.ttft_s * 1e3:.3f} ms is under the loopback floor "
                f"({LOOPBACK_FLOOR_S * 1e3:.2f} ms): the send was stamped late")
    tokens, reads = record.decode_tokens, record.decode_reads
    if tokens > 0 and tokens > reads * max_accept:
        return (f"{tokens} decode tokens arrived in {reads} socket read{'s' * (reads != 1)} "
                f"after the first token (at most {max_accept} per verify step): the client "
                "was not running while the server streamed")
    return None


@dataclass
class Measurement:
    """All counted requests of one prompt class, plus the aggregates the verdict uses."""

    backend: str
    records: list[RequestRecord] = field(default_factory=list)  # counted: timed or failed
    warmup: int = 0
    stopped: str = ""
    stop: Stop | None = None
    info: dict[str, Any] = field(default_factory=dict)
    interrupted: bool = False
    untimed: list[RequestRecord] = field(default_factory=list)  # retried: not counted
    max_untimed: int = 0

    @property
    def ok(self) -> list[RequestRecord]:
        return [r for r in self.records if r.ok]

    @property
    def failures(self) -> list[RequestRecord]:
        return [r for r in self.records if not r.ok]

    @property
    def decode_tok_s(self) -> float | None:
        """Tokens after the first over decode time, summed over requests (client clock)."""
        recs = [r for r in self.ok if r.decode_s > 0]
        time_s = sum(r.decode_s for r in recs)
        return sum(r.decode_tokens for r in recs) / time_s if time_s > 0 else None

    @property
    def server_decode_tok_s(self) -> float | None:
        """The same ratio on the server's own clock, where it reports one."""
        recs = [r for r in self.ok if r.server_decode_s]
        time_s = sum(r.server_decode_s or 0.0 for r in recs)
        if not recs or time_s <= 0:
            return None
        return sum(r.decode_tokens for r in recs) / time_s

    @property
    def accept_length(self) -> float | None:
        """Tokens over verify steps, summed over requests (bonus token included)."""
        recs = [r for r in self.ok if r.verify_steps]
        steps = sum(r.verify_steps or 0.0 for r in recs)
        return sum(r.decode_tokens for r in recs) / steps if steps > 0 else None

    @property
    def clock_ratio(self) -> float | None:
        """Client-clock decode rate over the server's, on the requests that have both."""
        recs = [r for r in self.ok if r.server_decode_s and r.decode_s > 0 and r.clock == "client"]
        if not recs:
            return None
        return sum(r.server_decode_s or 0.0 for r in recs) / sum(r.decode_s for r in recs)

    def clock_note(self) -> str | None:
        """A sentence when the client's and the server's clocks disagree beyond the tolerance."""
        ratio = self.clock_ratio
        if ratio is None or abs(ratio - 1) <= CLOCK_TOLERANCE:
            return None
        return (f"client and server clocks disagree: the client's decode rate is "
                f"{(ratio - 1) * 100:+.0f}% off the server's on the requests both timed")

    def server_clock_note(self) -> str | None:
        """A sentence when some requests were timed on the server's clock only."""
        recs = [r for r in self.ok if r.clock == "server"]
        if not recs:
            return None
        return (f"{len(recs)} of {len(self.ok)} requests timed on the server's clock (the client's "
                f"could not time them: {recs[0].client_untimed})")

    def untimed_note(self) -> str | None:
        if not self.untimed:
            return None
        return (f"{len(self.untimed)} of {len(self.records) + len(self.untimed)} requests could not "
                f"be timed and were retried (allowance {self.max_untimed}): "
                f"{self.untimed[0].untimed}")

    @property
    def accept_source(self) -> str:
        sources = {r.accept_source for r in self.ok}
        for s in ("estimate", "metrics", "server"):  # the weakest source used is the one named
            if s in sources:
                return s
        return "none"

    def ttft_ms(self) -> dict[str, float | None]:
        values = sorted(r.ttft_s * 1e3 for r in self.ok if r.clock == "client")
        if not values:
            return {"median": None, "p90": None}
        p90 = values[min(len(values) - 1, round(0.9 * (len(values) - 1)))]
        return {"median": statistics.median(values), "p90": p90}

    def to_dict(self, chunks: bool = False) -> dict[str, Any]:
        return {
            "backend": self.backend,
            "accept_length": self.accept_length,
            "accept_source": self.accept_source,
            "decode_tok_s": self.decode_tok_s,
            "server_decode_tok_s": self.server_decode_tok_s,
            "ttft_ms": self.ttft_ms(),
            "samples": len(self.records),
            "failures": len(self.failures),
            "warmup": self.warmup,
            "stopped": self.stopped,
            "stop": self.stop.name.lower() if self.stop else None,
            "interrupted": self.interrupted,
            "clock_ratio": self.clock_ratio,
            "clock_note": self.clock_note(),
            "server_timed": sum(1 for r in self.ok if r.clock == "server"),
            "server_clock_note": self.server_clock_note(),
            "untimed": len(self.untimed),
            "untimed_note": self.untimed_note(),
            "server": self.info,
            "requests": [r.to_dict(chunks) for r in self.records],
            "untimed_requests": [r.to_dict(chunks) for r in self.untimed],
        }


class Sampler:
    """Sends one request and turns the stream into a record with the best accept source."""

    def __init__(self, endpoint: Endpoint, backend: Backend, model: str | None = None,
                 max_accept: int = DEFAULT_MAX_ACCEPT) -> None:
        self.endpoint = endpoint
        self.backend = backend
        self.model = model
        self.max_accept = max(1, max_accept)
        self.counters_needed = True  # until a request shows the server reports all we need

    def _scrape_if_needed(self) -> dict[str, float] | None:
        return self._scrape() if self.counters_needed else None

    def _scrape(self) -> dict[str, float] | None:
        try:
            return self.backend.scrape(self.endpoint)
        except RequestError:
            return None

    def one(self, prompt: Prompt, max_tokens: int) -> RequestRecord:
        path, body = self.backend.build_request(prompt, prompt.max_tokens or max_tokens, self.model)
        before = self._scrape_if_needed()  # counters around a request: server clock, accept
        try:
            result = self._stream_with_retry(path, body)
            record = self.backend.parse(result)
        except RequestError as exc:
            return RequestRecord(error=str(exc))
        clock_in_fields = record.server_decode_s is not None  # before any counter deltas
        after = self._scrape() if before is not None else None
        if after is not None and before is not None:
            delta = after if self.backend.drains_metrics else {
                k: after.get(k, 0.0) - before.get(k, 0.0) for k in after}
            self.backend.server_clock_from_deltas(delta, record)
            if record.accept_source != "server":
                accept = self.backend.accept_from_deltas(delta, record)
                if accept is not None:
                    record.accept_length, record.accept_source = accept, "metrics"
        if record.accept_source not in ("server", "metrics"):
            estimate = burst_accept(record.chunk_times_s, record.decode_tokens,
                                    self.backend.chunks_are_steps)
            if estimate is not None:
                record.accept_length, record.accept_source = estimate, "estimate"
        if record.accept_source == "server" and clock_in_fields:
            self.counters_needed = False  # per-request fields carry both: no scrapes from now on
        problem = untimed_reason(record, self.max_accept)
        if problem and record.server_decode_s:  # the server timed it: use its clock, say so
            record.decode_s, record.clock, record.client_untimed = (
                record.server_decode_s, "server", problem)
        else:
            record.untimed = problem
        return record

    def _stream_with_retry(self, path: str, body: dict[str, Any]) -> Any:
        try:
            return self.endpoint.stream(path, body)
        except ConnectFailed:
            time.sleep(0.5)  # nothing was sent: one bounded retry is safe (a started stream
            return self.endpoint.stream(path, body)  # is never replayed: that hides a failure)


def measure(
    sampler: Sampler,
    prompts: Sequence[Prompt],
    max_tokens: int,
    rule: StoppingRule,
    warmup: int = 1,
    max_seconds: float | None = None,
    on_record: Callable[[Measurement], None] | None = None,
    measurement: Measurement | None = None,
    max_untimed: int | None = None,
) -> Measurement:
    """Run ``warmup`` uncounted requests, then sample prompts round-robin until ``rule`` stops.

    A request the client could not time is kept apart and retried; past ``max_untimed`` such
    requests (default: the rule's sample budget) sampling stops with
    :attr:`Stop.UNTIMED`.
    """
    m = measurement or Measurement(backend=sampler.backend.name)
    m.warmup = warmup
    m.max_untimed = rule.sample_budget if max_untimed is None else max_untimed
    for i in range(warmup):
        sampler.one(prompts[i % len(prompts)], max_tokens)
    start = time.monotonic()
    i = 0
    try:
        while True:
            reason = rule.stop_reason(m.records)
            if reason:
                m.stop, m.stopped = reason
                break
            if max_seconds is not None and time.monotonic() - start > max_seconds:
                m.stop, m.stopped = Stop.TIME_BUDGET, f"time budget of {max_seconds:g} s"
                break
            record = sampler.one(prompts[i % len(prompts)], max_tokens)
            i += 1
            if record.ok and record.untimed:
                m.untimed.append(record)
                if len(m.untimed) > m.max_untimed:
                    m.stop, m.stopped = Stop.UNTIMED, m.untimed_note() or ""
                    break
            else:
                m.records.append(record)
            if on_record:
                on_record(m)
    except KeyboardInterrupt:
        m.interrupted = True
        m.stop, m.stopped = Stop.INTERRUPTED, "interrupted"
        raise
    return m
