"""One prompt class's requests and the aggregates the verdict uses (frozen; ratios of sums)."""

from __future__ import annotations

import enum
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field

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

    def __post_init__(self) -> None:  # sequences given as lists are kept as tuples
        object.__setattr__(self, "records", tuple(self.records))
        object.__setattr__(self, "untimed", tuple(self.untimed))

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
        return "none"

    def ttft_ms(self) -> Ttft:
        values = sorted(r.ttft_s * 1e3 for r in self.ok if r.clock == "client")
        if not values:
            return Ttft()
        p90 = values[min(len(values) - 1, round(0.9 * (len(values) - 1)))]
        return Ttft(statistics.median(values), p90)

    def to_json(self, chunks: bool = False) -> dict[str, object]:
        """The measurement as ``specbound measure --format json`` prints it."""
        ttft = self.ttft_ms()
        return {
            "backend": self.backend,
            "accept_length": self.accept_length,
            "accept_source": self.accept_source,
            "decode_tok_s": self.decode_tok_s,
            "server_decode_tok_s": self.server_decode_tok_s,
            "ttft_ms": {"median": ttft.median, "p90": ttft.p90},
            "samples": len(self.records),
            "failures": len(self.failures),
            "warmup": self.warmup,
            "stopped": self.stopped,
            "stop": self.stop.name.lower() if self.stop else None,
            "interrupted": self.interrupted,
            "clock_ratio": self.clock_ratio,
            "clock_note": self.clock_note(),
            "server_timed": self.server_timed,
            "server_clock_note": self.server_clock_note(),
            "untimed": len(self.untimed),
            "untimed_note": self.untimed_note(),
            "server": self.info.to_json(),
            "requests": [r.to_json(chunks) for r in self.records],
            "untimed_requests": [r.to_json(chunks) for r in self.untimed],
        }
