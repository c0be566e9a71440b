"""Output lengths drawn from a distribution: ``max_tokens = {mean = 256, stdev = 96}`` in a
budget class instead of one number. Each request index gets its own draw from a generator
seeded by the class, so the same class draws the same lengths in every run, in the
no-speculation twin and in the baseline it is compared with."""

from __future__ import annotations

import math
import random
import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from pytest_specbound.serving.backends.base import Prompt

DISTRIBUTIONS = ("normal", "lognormal", "uniform")
KEYS = ("distribution", "mean", "stdev", "min", "max")


class LengthsProblem(ValueError):
    """A distribution table that cannot be drawn from (the message names the key)."""


@dataclass(frozen=True)
class OutputLengths:
    """Output lengths (tokens) as a distribution, clipped to ``[low, high]``."""

    distribution: str
    mean: float
    stdev: float
    low: int
    high: int

    @classmethod
    def from_table(cls, t: Mapping[str, Any]) -> OutputLengths:
        """Checked ``{distribution, mean, stdev, min, max}``: normal (the default) and
        lognormal take a mean and a stdev of the lengths themselves; uniform takes min and max."""
        unknown = sorted(set(t) - set(KEYS))
        if unknown:
            raise LengthsProblem(f"unknown key {unknown[0]!r}; valid: {', '.join(KEYS)}")
        kind = t.get("distribution", "normal")
        if kind not in DISTRIBUTIONS:
            raise LengthsProblem(f"distribution {kind!r}; valid: {', '.join(DISTRIBUTIONS)}")
        numbers = {k: t[k] for k in ("mean", "stdev", "min", "max") if k in t}
        for key, value in numbers.items():
            if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0 \
                    or not math.isfinite(value):
                raise LengthsProblem(f"{key} must be a non-negative number, got {value!r}")
        if kind == "uniform":
            if "min" not in numbers or "max" not in numbers:
                raise LengthsProblem("a uniform distribution needs min and max")
            low, high = _whole(numbers["min"], "min"), _whole(numbers["max"], "max")
            mean, stdev = (low + high) / 2, (high - low) / math.sqrt(12)
        else:
            if "mean" not in numbers or "stdev" not in numbers:
                raise LengthsProblem(f"a {kind} distribution needs mean and stdev")
            mean, stdev = float(numbers["mean"]), float(numbers["stdev"])
            if mean < 1:
                raise LengthsProblem(f"mean must be at least 1 token, got {mean:g}")
            low = _whole(numbers.get("min", 1), "min")
            high = _whole(numbers.get("max", max(1, math.ceil(mean + 4 * stdev))), "max")
        if not 1 <= low <= high:
            raise LengthsProblem(f"needs 1 <= min <= max, got min {low}, max {high}")
        return cls(kind, mean, stdev, low, high)

    @property
    def typical(self) -> int:
        """The length that stands for the class where one number is needed (the mean)."""
        return min(self.high, max(self.low, round(self.mean)))

    def draw(self, count: int, seed: int) -> list[int]:
        """``count`` lengths from a generator seeded with ``seed``."""
        rng = random.Random(seed)
        out = []
        for _ in range(count):
            if self.distribution == "uniform":
                value: float = rng.randint(self.low, self.high)
            elif self.distribution == "lognormal":
                sigma2 = math.log1p((self.stdev / self.mean) ** 2)
                value = rng.lognormvariate(math.log(self.mean) - sigma2 / 2, math.sqrt(sigma2))
            else:
                value = rng.gauss(self.mean, self.stdev)
            out.append(min(self.high, max(self.low, round(value))))
        return out

    def describe(self) -> str:
        if self.distribution == "uniform":
            return f"uniform {self.low}..{self.high}"
        return f"{self.distribution} {self.mean:g} +- {self.stdev:g} in [{self.low}, {self.high}]"

    def to_json(self) -> dict[str, object]:
        return {"distribution": self.distribution, "mean": self.mean, "stdev": self.stdev,
                "min": self.low, "max": self.high}


def _whole(value: float, key: str) -> int:
    if value != int(value):
        raise LengthsProblem(f"{key} must be a whole number of tokens, got {value!r}")
    return int(value)


def class_seed(name: str) -> int:
    """A class's draws' seed: stable across runs, processes and Python versions."""
    return zlib.crc32(name.encode("utf-8"))


def with_lengths(prompts: Sequence[Prompt], lengths: OutputLengths, requests: int,
                 seed: int) -> tuple[Prompt, ...]:
    """The prompts cycled out to at least ``requests`` entries (whole cycles), each entry that
    has no length of its own given a draw: request ``i`` sends entry ``i``, so the lengths
    vary across repeats of one prompt too."""
    cycles = max(1, math.ceil(requests / len(prompts)))
    entries = [prompts[i % len(prompts)] for i in range(cycles * len(prompts))]
    draws = lengths.draw(len(entries), seed)
    return tuple(p if p.max_tokens is not None else replace(p, max_tokens=n)
                 for p, n in zip(entries, draws, strict=True))
