"""Random prompts of a set number of tokens, as ``vllm bench serve --dataset-name random`` builds
them: ``prompts = {random = {input = 1024, output = 256, range = 0.1, prefix = 0}}``.

Each request draws its input length uniformly from ``input x [1 - range, 1 + range]`` and its
output length likewise; a shared prefix of ``prefix`` tokens (the same for every request, for
prefix caching) comes before the input. The tokens are drawn, seeded, from the ids the server's
own tokenizer gives ordinary text, decoded to text, and the text is re-tokenized and cut or
grown until the server counts the asked length (as vLLM's ``gen_prompt_decode_to_target_len``
does), so that input length is a controlled variable. The same class draws the same prompts in
every run, in the twin without speculation and in the baseline it is compared with.

The server's tokenizer is a :class:`Tokenizer`; a server without tokenize and detokenize routes
gets :class:`ApproximateTokenizer`, whose lengths are estimates and say so."""

from __future__ import annotations

import math
import random
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from pytest_specbound.serving.backends.base import Prompt

PREFIX = "random:"
KEYS = ("input", "output", "range", "prefix", "seed")
SCALE_ROUNDS = 4  # rounds scaling the id count by the tokens per id seen, before bisecting
MAX_COUNTS = 40  # tokenizer round trips per prompt at most


class RandomProblem(ValueError):
    """A random-prompt table that cannot be built (the message names the key)."""


class Tokenizer(Protocol):
    """What the prompt builder needs of a server's tokenizer."""

    exact: bool  # counts are the server's own (False: an estimate)
    source: str  # where the counts come from, for the notes

    def count(self, text: str) -> int:
        """Tokens the server counts for ``text`` sent as a completion's prompt."""
        ...

    def ids(self, text: str) -> list[int]:
        """The ids of ``text`` without the tokens the server adds to every prompt."""
        ...

    def text(self, ids: list[int]) -> str:
        ...


@dataclass(frozen=True)
class RandomPrompts:
    """Input and output lengths in tokens, their relative range, a shared prefix, a seed."""

    input: int
    output: int
    range: float = 0.0
    prefix: int = 0
    seed: int = 0

    @classmethod
    def from_table(cls, t: Mapping[str, Any]) -> RandomPrompts:
        unknown = sorted(set(t) - set(KEYS))
        if unknown:
            raise RandomProblem(f"unknown key {unknown[0]!r}; valid: {', '.join(KEYS)}")
        for key in ("input", "output"):
            if key not in t:
                raise RandomProblem(f"needs {key} (tokens), e.g. "
                                    "{random = {input = 1024, output = 256}}")
        values = {k: t[k] for k in KEYS if k in t}
        for key, value in values.items():
            if isinstance(value, bool) or not isinstance(value, (int, float)) \
                    or not math.isfinite(value) or value < 0:
                raise RandomProblem(f"{key} must be a non-negative number, got {value!r}")
            if key != "range" and value != int(value):
                raise RandomProblem(f"{key} must be a whole number, got {value!r}")
        if not 0 <= values.get("range", 0) < 1:
            raise RandomProblem(f"range must be in [0, 1), got {values['range']!r}")
        spec = cls(int(values["input"]), int(values["output"]), float(values.get("range", 0)),
                   int(values.get("prefix", 0)), int(values.get("seed", 0)))
        if spec.input_range[0] < 1 or spec.output_range[0] < 1:
            raise RandomProblem("input and output must stay at least 1 token across the range")
        return spec

    @classmethod
    def parse(cls, label: str) -> RandomPrompts:
        """The spec back from :meth:`label` (``random:input=1024,output=256,...``)."""
        try:
            pairs = dict(p.split("=", 1) for p in label.removeprefix(PREFIX).split(","))
            return cls.from_table({k: float(v) if k == "range" else int(v)
                                   for k, v in pairs.items()})
        except ValueError as exc:
            raise RandomProblem(f"expected {PREFIX}input=N,output=N[,range=R,prefix=N,seed=N]"
                                f", got {label!r} ({exc})") from None

    def label(self) -> str:
        return (f"{PREFIX}input={self.input},output={self.output},range={self.range:g},"
                f"prefix={self.prefix},seed={self.seed}")

    @property
    def input_range(self) -> tuple[int, int]:
        return (math.floor(self.input * (1 - self.range)),
                math.ceil(self.input * (1 + self.range)))

    @property
    def output_range(self) -> tuple[int, int]:
        return (math.floor(self.output * (1 - self.range)),
                math.ceil(self.output * (1 + self.range)))

    @property
    def mean_context(self) -> int:
        """Tokens in the KV cache halfway through a mean request's decode."""
        return self.prefix + self.input + self.output // 2

    def describe(self) -> str:
        spread = f" +-{self.range:.0%}" if self.range else ""
        prefix = f" after a shared prefix of {self.prefix}" if self.prefix else ""
        return (f"random prompts of {self.input}{spread} tokens{prefix}, {self.output}{spread} "
                "out")

    def lengths(self, count: int) -> list[tuple[int, int]]:
        """(input, output) tokens per request, seeded."""
        rng = random.Random(self.seed)
        (i0, i1), (o0, o1) = self.input_range, self.output_range
        return [(rng.randint(i0, i1), rng.randint(o0, o1)) for _ in range(count)]


@dataclass(frozen=True)
class Built:
    """The prompts and how close the server's counts came to the asked lengths."""

    prompts: tuple[Prompt, ...]
    asked: tuple[int, ...]  # input tokens asked per prompt (prefix included)
    counted: tuple[int, ...]  # what the tokenizer counts for each prompt's text
    source: str
    exact: bool
    spec: RandomPrompts | None = None  # what was asked

    @property
    def worst_miss(self) -> float:
        """The largest relative difference between counted and asked input lengths."""
        return max((abs(c - a) / a for a, c in zip(self.asked, self.counted, strict=True)),
                   default=0.0)

    def note(self) -> str:
        how = "counted by" if self.exact else "estimated with"
        return (f"{len(self.prompts)} prompts, input lengths {how} {self.source}: within "
                f"{self.worst_miss:.1%} of those asked")

    def to_json(self) -> dict[str, object]:
        """What a result keeps of how its prompts were made (its ``workload``)."""
        spec = self.spec
        asked = {"random": {"input": spec.input, "output": spec.output, "range": spec.range,
                            "prefix": spec.prefix, "seed": spec.seed}} if spec else {}
        return {**asked, "prompts": len(self.prompts), "tokenizer": self.source,
                "exact": self.exact, "input_tokens_worst_miss": round(self.worst_miss, 4),
                "asked_input_tokens": list(self.asked),
                "counted_input_tokens": list(self.counted),
                "notes": [*([spec.describe()] if spec else []), self.note()]}


def build(spec: RandomPrompts, tokenizer: Tokenizer, count: int, pool_text: str) -> Built:
    """``count`` prompts: ids drawn from the ids of ``pool_text`` (ordinary text, so each id
    decodes to something the tokenizer reads back), the shared prefix first."""
    pool = sorted(set(tokenizer.ids(pool_text)))
    if len(pool) < 2:
        raise RandomProblem(f"the tokenizer ({tokenizer.source}) gave under 2 distinct ids for "
                            "ordinary text")
    rng = random.Random(spec.seed + 1)
    special = tokenizer.count("")  # what the server adds to every prompt (a BOS token)
    prefix = _fitted(tokenizer, [rng.choice(pool) for _ in range(spec.prefix)], spec.prefix,
                     pool, rng, special)[0] if spec.prefix else ""
    base = tokenizer.count(prefix) if prefix else special
    prompts, asked, counted = [], [], []
    for index, (n_in, n_out) in enumerate(spec.lengths(count)):
        # as vLLM's: the server's own tokens count in the input length
        start = rng.randrange(len(pool))
        ids = [pool[(start + index + k) % len(pool)] for k in range(max(1, n_in - special))]
        rng.shuffle(ids)
        text, n = _fitted(tokenizer, ids, max(1, n_in - special), pool, rng, base, prefix)
        prompts.append(Prompt(text=prefix + text, max_tokens=n_out))
        asked.append(spec.prefix + n_in)
        counted.append(n)
    return Built(tuple(prompts), tuple(asked), tuple(counted), tokenizer.source,
                 tokenizer.exact, spec)


def _fitted(tokenizer: Tokenizer, ids: list[int], target: int, pool: list[int],
            rng: random.Random, base: int, prefix: str = "") -> tuple[str, int]:
    """The text of the first L of ``ids`` (grown from ``pool`` where L needs more) whose count
    after ``prefix`` adds ``target`` tokens to the ``base`` the server counts anyway: L scaled
    by the tokens per id seen (a few rounds), then bisected between the closest short and
    long ones; the closest found."""
    ids = list(ids)
    seen: dict[int, tuple[int, str]] = {}  # L -> (miss in tokens, text)

    def miss_at(length: int) -> int:
        if length not in seen:
            while len(ids) < length:
                ids.append(rng.choice(pool))
            text = tokenizer.text(ids[:length])
            seen[length] = (tokenizer.count(prefix + text) - base - target, text)
        return seen[length][0]

    length = max(1, target)
    for _ in range(SCALE_ROUNDS):
        miss = miss_at(length)
        if miss == 0:
            break
        made = max(1, miss + target)  # tokens these ids came to
        length = max(1, round(length * target / made))
        if length in seen:
            break
    while True:
        short = [n for n, (m, _) in seen.items() if m < 0]
        long = [n for n, (m, _) in seen.items() if m > 0]
        if any(m == 0 for m, _ in seen.values()) or not short or not long \
                or min(long) - max(short) <= 1 or len(seen) >= MAX_COUNTS:
            break
        miss_at((max(short) + min(long)) // 2)
    miss, text = min(seen.values(), key=lambda v: abs(v[0]))
    return text, miss + base + target
