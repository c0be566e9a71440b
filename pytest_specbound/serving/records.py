"""Per-request measurement records: frozen, built once per request by the backend and sampler."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Literal, get_args

AcceptSource = Literal["server", "metrics", "window", "estimate", "none"]
# window: server counters over a whole concurrency level (no per-request figure exists)
ACCEPT_SOURCES: tuple[AcceptSource, ...] = get_args(AcceptSource)
Clock = Literal["client", "server"]  # whose clock a request's decode time is on
JSONObject = Mapping[str, object]  # raw server fields, stored as the server sent them


@dataclass(frozen=True)
class RequestRecord:
    """One streamed request as the client saw it, plus what the server said about it."""

    prompt_tokens: int | None = None
    completion_tokens: int = 0
    cached_prompt_tokens: int | None = None  # of the prompt, served from the server's cache
    ttft_s: float = 0.0
    decode_s: float = 0.0  # first token to last token, client clock
    chunk_times_s: tuple[float, ...] = ()  # since the request was sent
    chunk_tokens: tuple[int, ...] = ()
    chunk_reads: tuple[int, ...] = ()  # the socket read each chunk came in
    tokens_per_event: int | None = None  # where the server streams several steps per event
    kernel_stamped: bool = False  # each read timed by the kernel's receive stamp, not the reader
    server_decode_s: float | None = None  # the server's own decode window, where it reports one
    server_decode_tok_s: float | None = None
    server_ttft_s: float | None = None  # the server's own time to first token, where it says
    accept_length: float | None = None  # tokens per verify step, bonus included
    accept_source: AcceptSource = "none"
    error: str | None = None
    untimed: str | None = None  # why no clock could time this request (then it is retried)
    clock: Clock = "client"  # "server" where the client's clock failed and the server's was used
    client_untimed: str | None = None  # why the client's clock failed (then clock is "server")
    server: JSONObject = field(default_factory=dict)  # raw per-request server fields
    sent_s: float | None = None  # when it was sent, seconds since its level's window began
    concurrency: int = 1  # the closed-loop level it ran at (streams kept busy)
    in_flight: float | None = None  # requests sent and unfinished, time-averaged over its decode
    co_decoding: float | None = None  # requests past their first token, likewise (itself included)
    others_prefill_tokens: float | None = None  # other requests' prompt tokens computed meanwhile

    @property
    def ok(self) -> bool:
        return self.error is None

    @property
    def decode_reads(self) -> int:
        """Socket reads that brought decode tokens (those after the first token's read)."""
        return len(set(self.chunk_reads[1:]) - {self.chunk_reads[0]}) if self.chunk_reads else 0

    @property
    def decode_tokens(self) -> int:
        """Tokens after the first (the first comes from prefill)."""
        return max(0, self.completion_tokens - 1)

    @property
    def verify_steps(self) -> float | None:
        if not self.accept_length:
            return None
        return self.decode_tokens / self.accept_length

    @property
    def decode_tok_s(self) -> float | None:
        return self.decode_tokens / self.decode_s if self.decode_s > 0 else None

    @property
    def computed_prompt_tokens(self) -> int | None:
        """Prompt tokens the server computed, where it says how many its cache served."""
        if self.prompt_tokens is None or self.cached_prompt_tokens is None:
            return None
        return max(0, self.prompt_tokens - self.cached_prompt_tokens)

    @property
    def prefill_window(self) -> tuple[float, float] | None:
        """Sent to first token, on the level's clock: when the server computed the prompt."""
        if self.sent_s is None or not self.ok or self.ttft_s <= 0:
            return None
        return self.sent_s, self.sent_s + self.ttft_s

    @property
    def decode_window(self) -> tuple[float, float] | None:
        """The decode, on the level's clock (where the send time is known): it ends at the
        last token's arrival and lasts the record's decode time, so the overlaps and the
        aggregate use the same time as the per-user rate. That is first token to last token
        where the client timed each read; longer where the first read came late (the decode
        time is extrapolated from the reads after it) or where the server's clock timed a
        burst the client saw at once."""
        if self.sent_s is None or not self.ok:
            return None
        last = self.chunk_times_s[-1] if self.chunk_times_s else self.ttft_s + self.decode_s
        end = self.sent_s + max(last, self.ttft_s)
        if self.decode_s > 0:
            return max(self.sent_s, end - self.decode_s), end
        return self.sent_s + self.ttft_s, end

    @property
    def span(self) -> tuple[float, float] | None:
        """Sent to last token, on the level's clock."""
        window = self.decode_window
        return (self.sent_s, window[1]) if window and self.sent_s is not None else None

    def to_json(self, chunks: bool = False) -> dict[str, object]:
        """The record in the results JSON (chunk timings only when asked)."""
        data = asdict(self)
        for key in ("chunk_times_s", "chunk_tokens", "chunk_reads"):
            value = data.pop(key)
            if chunks:
                data[key] = list(value)
        data["server"] = dict(self.server)
        data["decode_tok_s"] = self.decode_tok_s
        data["verify_steps"] = self.verify_steps
        return data

    @classmethod
    def from_json(cls, data: Mapping[str, object]) -> RequestRecord:
        """A record read back from the results JSON (derived figures are recomputed)."""
        names = cls.__dataclass_fields__
        kwargs = {k: (tuple(v) if isinstance(v, list) else v) for k, v in data.items()
                  if k in names}
        return cls(**kwargs)  # type: ignore[arg-type]  # values as written by to_json


@dataclass(frozen=True)
class ServerInfo:
    """What a server says about itself: the models it serves, its version, its speculation."""

    models: tuple[str, ...] = ()
    version: str | None = None
    speculative: JSONObject | None = None  # the server's own speculative settings, as given
    model_path: str | None = None

    def to_json(self) -> dict[str, object]:
        data: dict[str, object] = {"models": list(self.models)}
        for key in ("version", "speculative", "model_path"):
            value = getattr(self, key)
            if value is not None:
                data[key] = dict(value) if key == "speculative" else value
        return data

    @classmethod
    def from_json(cls, data: Mapping[str, object] | None) -> ServerInfo:
        data = data or {}
        models = data.get("models")
        spec = data.get("speculative")
        version, path = data.get("version"), data.get("model_path")
        return cls(tuple(str(m) for m in models if m) if isinstance(models, list) else (),
                   str(version) if version is not None else None,
                   spec if isinstance(spec, Mapping) else None,
                   str(path) if path is not None else None)
