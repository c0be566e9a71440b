"""One prompt class's requests and the aggregates the verdict uses (frozen; ratios of sums)."""

from __future__ import annotations

import collections
import enum
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from functools import cached_property

from pytest_specbound.measure.overlap import Overlap, overlaps
from pytest_specbound.serving.records import AcceptSource, RequestRecord, ServerInfo

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


@dataclass(frozen=True)
class Ttft:
    """Time to first token over a class's requests, in milliseconds (client clock)."""

    median: float | None = None
    p90: float | None = None
    p99: float | None = None


@dataclass(frozen=True)
class Measurement:
    """All counted requests of one prompt class, plus the aggregates the verdict uses."""

    backend: str
    records: Sequence[RequestRecord] = ()  # counted: timed or failed
    warmup: int = 0
    stopped: str = ""
    stop: Stop | None = None
    info: ServerInfo = field(default_factory=ServerInfo)
    interrupted: bool = False
    untimed: Sequence[RequestRecord] = ()  # retried: not counted
    max_untimed: int = 0
    concurrency: int = 1  # closed-loop streams
    drained: Sequence[RequestRecord] = ()  # finished after the rule stopped: load, not counted
    window_accept: float | None = None  # from server counters over the level's whole window
    transient: int = 0  # the first records: a warm-up transient, left out of the figures
    counters_restarted: bool = False  # the server's counters went down inside the window

    def __post_init__(self) -> None:  # sequences given as lists are kept as tuples
        for name in ("records", "untimed", "drained"):
            object.__setattr__(self, name, tuple(getattr(self, name)))

    @cached_property
    def overlaps(self) -> list[Overlap | None]:
        """Per counted record: requests in flight and decoding while it decoded, its share."""
        return overlaps(self.records, (*self.untimed, *self.drained))

    @property
    def counted(self) -> Sequence[RequestRecord]:
        """The records the figures use: all counted ones after the warm-up transient."""
        return self.records[self.transient:]

    @property
    def timed(self) -> list[RequestRecord]:
        """The counted requests that succeeded and were timed, after the warm-up transient."""
        return [r for r in self.counted if r.ok and r.decode_s > 0]

    def timed_overlaps(self) -> list[tuple[RequestRecord, Overlap]]:
        """:attr:`timed` requests with their overlaps (those with a decode window)."""
        pairs = list(zip(self.records, self.overlaps, strict=True))[self.transient:]
        return [(r, o) for r, o in pairs if o is not None and r.ok and r.decode_s > 0]

    def with_overlaps(self) -> Measurement:
        """This measurement with each counted record's in_flight, co_decoding and
        others_prefill_tokens filled in."""
        records = tuple(r if o is None else replace(r, in_flight=round(o.in_flight, 3),
                                                    co_decoding=round(o.co_decoding, 3),
                                                    others_prefill_tokens=round(o.prefill_tokens, 1))
                        for r, o in zip(self.records, self.overlaps, strict=True))
        return replace(self, records=records)

    def _decode_weighted(self, figure: str) -> float | None:
        """An overlap figure averaged over the counted requests, weighted by decode time."""
        pairs = self.timed_overlaps()
        total = sum(r.decode_s for r, _ in pairs)
        return sum(getattr(o, figure) * r.decode_s for r, o in pairs) / total if total > 0 \
            else None

    @property
    def co_decoding(self) -> float | None:
        """Sequences decoding at once, time-weighted over the counted requests' decodes."""
        return self._decode_weighted("co_decoding")

    @property
    def others_prefill_tokens(self) -> float | None:
        """Other requests' prompt tokens computed during a counted request's decode, on
        average; None where no request says how many prompt tokens the server computed."""
        pairs = self.timed_overlaps()
        everyone = (*self.records, *self.untimed, *self.drained)
        if not pairs or all(r.computed_prompt_tokens is None for r in everyone):
            return None
        return sum(o.prefill_tokens for _, o in pairs) / len(pairs)

    @property
    def in_flight(self) -> float | None:
        """Requests in flight (sent, unfinished), time-weighted likewise."""
        return self._decode_weighted("in_flight")

    @property
    def aggregate_tok_s(self) -> float | None:
        """Decode tokens of all counted requests over their summed shares of wall time: the
        server's output rate while the level ran (equals decode_tok_s at concurrency 1)."""
        pairs = self.timed_overlaps()
        share = sum(o.share_s for _, o in pairs)
        return sum(r.decode_tokens for r, _ in pairs) / share if share > 0 else None

    @property
    def ok(self) -> list[RequestRecord]:
        """Successful requests after the warm-up transient."""
        return [r for r in self.counted if r.ok]

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
        if steps > 0:
            return sum(r.decode_tokens for r in recs) / steps
        return self.window_accept

    @property
    def clock_ratio(self) -> float | None:
        """Client-clock decode rate over the server's, on the requests that have both."""
        recs = [r for r in self.ok if r.server_decode_s and r.decode_s > 0 and r.clock == "client"]
        if not recs:
            return None
        return sum(r.server_decode_s or 0.0 for r in recs) / sum(r.decode_s for r in recs)

    @property
    def server_timed(self) -> int:
        """Requests timed on the server's clock because the client's could not time them."""
        return sum(1 for r in self.ok if r.clock == "server")

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

    def chunked_note(self) -> str | None:
        """A sentence when the server sent several verify steps per event (a stream interval)."""
        sizes = [r.tokens_per_event for r in self.ok if r.tokens_per_event]
        if not sizes:
            return None
        return (f"the server sent up to {max(sizes)} tokens per event in {len(sizes)} of "
                f"{len(self.ok)} requests (a stream interval, or a gateway that coalesces): each "
                "event is timed as it arrived, TTFT when the first token's event did")

    def restart_note(self) -> str | None:
        """A sentence when the server restarted inside the level's counter window."""
        if not self.counters_restarted:
            return None
        return ("the server's counters went down, or grew less than the tokens received, "
                "during the measurement (a restart, or /metrics answered by another replica "
                "behind a load balancer): no accept length is taken from them")

    def notes(self) -> list[tuple[str, str]]:
        """How the measurement was taken, where it matters: (reason code, sentence) pairs."""
        found = [("clock_disagreement", self.clock_note()),
                 ("server_clock_used", self.server_clock_note()),
                 ("untimed_retried", self.untimed_note()), ("stream_chunked", self.chunked_note()),
                 ("server_restarted", self.restart_note())]
        return [(code, note) for code, note in found if note]

    def failure_note(self) -> str | None:
        """How many requests failed and the commonest error, in one line (None: none failed)."""
        failed = self.failures
        if not failed:
            return None
        errors = collections.Counter(r.error or "unknown error" for r in failed)
        (common, times), *others = errors.most_common()
        total = len(self.records)
        text = f"{len(failed)} of {total} request{'s' * (total != 1)} failed: {common}"
        if others:
            text += f" ({times}x; {len(failed) - times} more with {len(others)} other error" \
                    f"{'s' * (len(others) != 1)})"
        return text

    def untimed_note(self) -> str | None:
        if not self.untimed:
            return None
        return (f"{len(self.untimed)} of {len(self.records) + len(self.untimed)} requests could not "
                f"be timed and were retried (allowance {self.max_untimed}): "
                f"{self.untimed[0].untimed}")

    @property
    def accept_source(self) -> AcceptSource:
        sources = {r.accept_source for r in self.ok}
        for s in ("estimate", "metrics", "server"):  # the weakest source used is the one named
            if s in sources:
                return s
        return "window" if self.window_accept is not None else "none"

    def ttft_ms(self) -> Ttft:
        values = sorted(r.ttft_s * 1e3 for r in self.ok if r.clock == "client")
        if not values:
            return Ttft()
        def pct(q: float) -> float:
            return values[min(len(values) - 1, round(q * (len(values) - 1)))]

        return Ttft(statistics.median(values), pct(0.9), pct(0.99))

    def to_json(self, chunks: bool = False) -> dict[str, object]:
        """The measurement as ``specbound measure --format json`` prints it."""
        ttft = self.ttft_ms()
        return {
            "backend": self.backend,
            "accept_length": self.accept_length,
            "accept_source": self.accept_source,
            "decode_tok_s": self.decode_tok_s,
            "server_decode_tok_s": self.server_decode_tok_s,
            "ttft_ms": {"median": ttft.median, "p90": ttft.p90, "p99": ttft.p99},
            "concurrency": self.concurrency,
            "aggregate_tok_s": self.aggregate_tok_s,
            "in_flight": self.in_flight,
            "co_decoding": self.co_decoding,
            "samples": len(self.records),
            "failures": len(self.failures),
            "warmup": self.warmup,
            "transient": self.transient,
            "stopped": self.stopped,
            "stop": self.stop.name.lower() if self.stop else None,
            "interrupted": self.interrupted,
            "clock_ratio": self.clock_ratio,
            "clock_note": self.clock_note(),
            "server_timed": self.server_timed,
            "server_clock_note": self.server_clock_note(),
            "chunked_note": self.chunked_note(),
            "restart_note": self.restart_note(),
            "untimed": len(self.untimed),
            "untimed_note": self.untimed_note(),
            "server": self.info.to_json(),
            "requests": [r.to_json(chunks) for r in self.records],
            "untimed_requests": [r.to_json(chunks) for r in self.untimed],
            "drained_requests": [r.to_json(chunks) for r in self.drained],
        }
