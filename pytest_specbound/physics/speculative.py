"""Speculative-decoding method strings: ``METHOD[:STEPS[:DRAFT_TOKENS]]``."""

from __future__ import annotations

from dataclasses import dataclass

from pytest_specbound.errors import ConfigError

METHODS = ("none", "mtp", "eagle", "eagle3", "draft", "ngram", "dflash")
HEAD_METHODS = ("mtp", "eagle", "eagle3", "dflash")  # drafting heads: no draft model of their own
DEFAULT_STEPS = {"none": 0, "mtp": 3, "eagle": 3, "eagle3": 3, "draft": 4, "ngram": 3, "dflash": 7}


@dataclass(frozen=True)
class Speculation:
    """How each round drafts: ``steps`` chained drafts, ``draft_tokens`` verified (trees: more)."""

    method: str
    steps: int
    draft_tokens: int  # tokens the target verifies besides the bonus token

    @property
    def max_accept(self) -> int:
        """Most tokens one round can emit: every draft accepted plus the bonus token."""
        return self.steps + 1

    @property
    def verify_tokens(self) -> int:
        return self.draft_tokens + 1

    @property
    def label(self) -> str:
        if self.method == "none":
            return "none"
        tree = f":{self.draft_tokens}" if self.draft_tokens != self.steps else ""
        return f"{self.method}:{self.steps}{tree}"


def parse_speculation(
    spec: str | None, steps: int | None = None, draft_tokens: int | None = None,
    origin: str = "speculation",
) -> Speculation:
    """Parse ``mtp:3``, ``eagle3:6:10`` (tree of 10 tokens, depth 6), ``none``..."""
    text = (spec or "none").strip().lower()
    parts = text.split(":")
    method = parts[0]
    if method not in METHODS:
        raise ConfigError(f"{origin}={spec}: unknown method '{method}'; valid: {', '.join(METHODS)}")
    if len(parts) > 3:
        raise ConfigError(f"{origin}={spec}: expected METHOD[:STEPS[:DRAFT_TOKENS]]")
    try:
        numbers = [int(p) for p in parts[1:]]
    except ValueError:
        raise ConfigError(
            f"{origin}={spec}: STEPS and DRAFT_TOKENS must be whole numbers, e.g. mtp:3 or eagle3:6:10"
        ) from None
    n_steps = numbers[0] if numbers else steps if steps is not None else DEFAULT_STEPS[method]
    n_tokens = numbers[1] if len(numbers) > 1 else draft_tokens or n_steps
    if method == "none":
        return Speculation("none", 0, 0)
    if n_steps < 1:
        raise ConfigError(f"{origin}={spec}: STEPS must be at least 1")
    if n_tokens < n_steps:
        raise ConfigError(f"{origin}={spec}: DRAFT_TOKENS ({n_tokens}) must be >= STEPS ({n_steps})")
    return Speculation(method, n_steps, n_tokens)
