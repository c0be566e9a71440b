"""Warm-up, then one request at a time until the stopping rule says stop; aggregates as ratios."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from .backends.base import Backend, Prompt, burst_accept
from .errors import RequestError
from .records import RequestRecord
from .stream import Endpoint


class StoppingRule(Protocol):
    def stop_reason(self, records: Sequence[RequestRecord]) -> str | None:
        """Why to stop now, or None to keep sampling."""


@dataclass(frozen=True)
class FixedCount:
    """Stop after ``n`` requests (failed ones included: they are results too)."""

    n: int

    def stop_reason(self, records: Sequence[RequestRecord]) -> str | None:
        return f"fixed count of {self.n} requests" if len(records) >= self.n else None


@dataclass
class Measurement:
    """All counted requests of one prompt class, plus the aggregates the verdict uses."""

    backend: str
    records: list[RequestRecord] = field(default_factory=list)
    warmup: int = 0
    stopped: str = ""
    info: dict[str, Any] = field(default_factory=dict)
    interrupted: bool = False

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
    def accept_source(self) -> str:
        sources = {r.accept_source for r in self.ok}
        for s in ("estimate", "metrics", "server"):  # the weakest source used is the one named
            if s in sources:
                return s
        return "none"

    def ttft_ms(self) -> dict[str, float | None]:
        values = sorted(r.ttft_s * 1e3 for r in self.ok)
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
            "interrupted": self.interrupted,
            "server": self.info,
            "requests": [r.to_dict(chunks) for r in self.records],
        }


class Sampler:
    """Sends one request and turns the stream into a record with the best accept source."""

    def __init__(self, endpoint: Endpoint, backend: Backend, model: str | None = None) -> None:
        self.endpoint = endpoint
        self.backend = backend
        self.model = model

    def _scrape(self) -> dict[str, float] | None:
        try:
            return self.backend.scrape(self.endpoint)
        except RequestError:
            return None

    def one(self, prompt: Prompt, max_tokens: int) -> RequestRecord:
        path, body = self.backend.build_request(prompt, prompt.max_tokens or max_tokens, self.model)
        before = self._scrape()  # counters around each request: the fallback accept source
        try:
            result = self._stream_with_retry(path, body)
            record = self.backend.parse(result)
        except RequestError as exc:
            return RequestRecord(error=str(exc))
        if record.accept_source == "server":
            return record
        after = self._scrape() if before is not None else None
        if after is not None and before is not None:
            delta = after if self.backend.drains_metrics else {
                k: after.get(k, 0.0) - before.get(k, 0.0) for k in after}
            accept = self.backend.accept_from_deltas(delta, record)
            if accept is not None:
                record.accept_length, record.accept_source = accept, "metrics"
                return record
        estimate = burst_accept(record.chunk_times_s, record.decode_tokens,
                                self.backend.chunks_are_steps)
        if estimate is not None:
            record.accept_length, record.accept_source = estimate, "estimate"
        return record

    def _stream_with_retry(self, path: str, body: dict[str, Any]) -> Any:
        try:
            return self.endpoint.stream(path, body)
        except RequestError as exc:
            if "connection failed" not in str(exc):
                raise  # a started stream is never replayed: that would hide a failure
            time.sleep(0.5)  # nothing was sent: one bounded retry is safe
            return self.endpoint.stream(path, body)


def measure(
    sampler: Sampler,
    prompts: Sequence[Prompt],
    max_tokens: int,
    rule: StoppingRule,
    warmup: int = 1,
    max_seconds: float | None = None,
    on_record: Callable[[Measurement], None] | None = None,
    measurement: Measurement | None = None,
) -> Measurement:
    """Run ``warmup`` uncounted requests, then sample prompts round-robin until ``rule`` stops."""
    m = measurement or Measurement(backend=sampler.backend.name)
    m.warmup = warmup
    for i in range(warmup):
        sampler.one(prompts[i % len(prompts)], max_tokens)
    start = time.monotonic()
    i = 0
    try:
        while True:
            reason = rule.stop_reason(m.records)
            if reason:
                m.stopped = reason
                break
            if max_seconds is not None and time.monotonic() - start > max_seconds:
                m.stopped = f"time budget of {max_seconds:g} s"
                break
            m.records.append(sampler.one(prompts[i % len(prompts)], max_tokens))
            i += 1
            if on_record:
                on_record(m)
    except KeyboardInterrupt:
        m.interrupted = True
        m.stopped = "interrupted"
        raise
    return m
