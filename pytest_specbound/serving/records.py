"""Per-request measurement records (plain data, JSON-ready)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

ACCEPT_SOURCES = ("server", "metrics", "estimate", "none")


@dataclass
class RequestRecord:
    """One streamed request as the client saw it, plus what the server said about it."""

    prompt_tokens: int | None = None
    completion_tokens: int = 0
    ttft_s: float = 0.0
    decode_s: float = 0.0  # first token to last token, client clock
    chunk_times_s: list[float] = field(default_factory=list)  # since the request was sent
    chunk_tokens: list[int] = field(default_factory=list)
    chunk_reads: list[int] = field(default_factory=list)  # the socket read each chunk came in
    server_decode_s: float | None = None  # the server's own decode window, where it reports one
    server_decode_tok_s: float | None = None
    accept_length: float | None = None  # tokens per verify step, bonus included
    accept_source: str = "none"
    error: str | None = None
    untimed: str | None = None  # why no clock could time this request (then it is retried)
    clock: str = "client"  # whose clock decode_s is: "client", or "server" where the client's failed
    client_untimed: str | None = None  # why the client's clock failed (then clock is "server")
    server: dict[str, Any] = field(default_factory=dict)  # raw per-request server fields

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

    def to_dict(self, chunks: bool = False) -> dict[str, Any]:
        data = asdict(self)
        if not chunks:
            data.pop("chunk_times_s")
            data.pop("chunk_tokens")
            data.pop("chunk_reads")
        data["decode_tok_s"] = self.decode_tok_s
        data["verify_steps"] = self.verify_steps
        return data
