"""A budget's prompt classes: :class:`ClassBudget` and the ``[classes.NAME]`` table's parser
(its thresholds as :mod:`pytest_specbound.gate.verdicts.thresholds` declares them)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from pytest_specbound._toml import TomlTable
from pytest_specbound.gate.schema.where import Where
from pytest_specbound.gate.verdicts.thresholds import SPECS, Spec, keys, needed
from pytest_specbound.measure.hub_sets import is_hub
from pytest_specbound.measure.lengths import LengthsProblem, OutputLengths
from pytest_specbound.measure.prompts import BUILTIN, default_max_tokens
from pytest_specbound.serving.backends.base import SAMPLING_KEYS, Sampling
from pytest_specbound.values import ValueProblem, levels

if TYPE_CHECKING:
    from pytest_specbound.measure.random_prompts import RandomPrompts

OWN_KEYS = {"prompts", "max_tokens", "samples", "warmup", "concurrency", "require_no_throttle",
            "resolution", "tpot_percentile", "category", "pin_accept", "turns", *SAMPLING_KEYS}
LEVEL_OWN_KEYS = {"samples", "warmup", "resolution", "tpot_percentile", *SAMPLING_KEYS}


def class_keys() -> set[str]:
    """A class table's keys: its own and every declared threshold's."""
    return OWN_KEYS | set(keys())


def level_keys() -> set[str]:
    """A ``[classes.NAME.cN]`` table's keys."""
    return LEVEL_OWN_KEYS | set(keys())
LEVEL_TABLE = re.compile(r"^c([1-9][0-9]*)$")  # [classes.NAME.c4]: thresholds at concurrency 4


@dataclass(frozen=True)
class ClassBudget:
    """One prompt class: what its requests ask, how it is sampled, and its thresholds
    (``limits``: budget key -> value, for the keys :data:`~pytest_specbound.gate.verdicts.thresholds.SPECS`
    declares)."""

    name: str
    prompts: str
    max_tokens: int  # the output length (a distribution's mean where one is given)
    limits: Mapping[str, Any] = field(default_factory=dict)
    samples: int | None = None
    warmup: int | None = None
    concurrency: tuple[int, ...] = (1,)  # closed-loop levels: one test item each
    levels: Mapping[int, Mapping[str, Any]] = field(default_factory=dict)  # [classes.X.cN]
    require_no_throttle: bool = False  # a throttled GPU fails the class on its own
    resolution: float | None = None  # relative miss the verdict must catch (default: settings)
    category: tuple[str, ...] = ()  # within a prompt file: the categories measured (all: empty)
    tpot_percentile: float = 99.0  # the percentile of requests max_tpot_ms holds for
    temperature: float = 0.0  # how tokens are chosen (greedy by default), as deployed
    top_p: float | None = None
    top_k: int | None = None
    min_p: float | None = None
    seed: int | None = None
    output_lengths: OutputLengths | None = None  # max_tokens as a distribution
    # the engine's synthetic acceptance at this accept length: the system judged without the
    # drafter's noise (serving/pinning.py); the drafter's band belongs to an unpinned class
    pin_accept: float | None = None
    # a conversation's human turns a request uses: "first" (the peers' default for ShareGPT),
    # "replay" (all: the earlier ones replayed unmeasured) or a count; None: the format's own
    turns: str | int | None = None
    output_given: bool = False  # max_tokens set by the class (over a conversation's reply)

    @property
    def random(self) -> RandomPrompts | None:
        """Random prompts of a set length, where the class asks for them."""
        from pytest_specbound.measure.random_prompts import PREFIX, RandomPrompts

        return RandomPrompts.parse(self.prompts) if self.prompts.startswith(PREFIX) else None

    @property
    def sampling(self) -> Sampling:
        return Sampling(self.temperature, self.top_p, self.top_k, self.min_p, self.seed)

    @property
    def level_ids(self) -> bool:
        """Whether item ids name the level (any class that declares levels besides 1 alone)."""
        return self.concurrency != (1,)

    @property
    def accept(self) -> tuple[float, float] | None:
        """The accept band, where the class sets one."""
        band = self.limits.get("accept")
        return (float(band[0]), float(band[1])) if band is not None else None

    def value_of(self, key: str) -> Any:
        """A budget key's value as parsed (a threshold's from ``limits``)."""
        return self.limits.get(key) if key in keys() else getattr(self, key)

    def with_values(self, values: Mapping[str, Any]) -> ClassBudget:
        """This class with ``values`` (budget keys, as parsed) over its own."""
        thresholds = keys()
        rest = {k: v for k, v in values.items() if k not in thresholds}
        limits = {**self.limits, **{k: v for k, v in values.items() if k in thresholds}}
        return replace(self, limits={k: v for k, v in limits.items() if v is not None}, **rest)

    def without_limits(self) -> ClassBudget:
        """The class measured, not judged (a twin): no thresholds, at any level."""
        thresholds = keys()
        levels = {k: {n: v for n, v in t.items() if n not in thresholds}
                  for k, t in self.levels.items()}
        return replace(self, limits={}, levels=levels, pin_accept=None)

    def at(self, level: int) -> ClassBudget:
        """The class as judged at concurrency ``level``: its ``[classes.NAME.cLEVEL]`` values
        over the class's own."""
        return self.with_values(self.levels.get(level, {}))


def parse_class(w: Where, table_name: str, t: Any, label: str | None = None) -> ClassBudget:
    """``[classes.NAME]`` (or a ``[cN]`` / ``[hardware.X.classes.NAME]`` table), checked."""
    table = table_name if "." in table_name else f"classes.{table_name}"
    name = label or table_name
    if not isinstance(t, dict):
        raise w.error(None, name, "must be a table")
    level_tables = {k: v for k, v in t.items() if LEVEL_TABLE.match(k) and isinstance(v, dict)}
    w.check_keys(table, {k: v for k, v in t.items() if k not in level_tables}, class_keys(),
                 "; and [cN] tables of thresholds at concurrency N")
    concurrency = _concurrency(w, table, t.get("concurrency", 1))
    levels: dict[int, Mapping[str, Any]] = {}
    for key, values in level_tables.items():
        level = int(key[1:])
        if level not in concurrency:
            raise w.error(table, key, f"concurrency {level} is not one of the class's levels "
                          f"{list(concurrency)}")
        w.check_keys(f"{table}.{key}", values, level_keys())
        checked = parse_class(w, f"{table}.{key}", {"prompts": t.get("prompts", name), **values},
                              label=name)
        levels[level] = {k: checked.value_of(k) for k in values}
    prompts = _prompts(w, table, t, name)
    return ClassBudget(
        name=name,
        prompts=prompts,
        **_max_tokens(w, table, t, prompts),
        limits=_limits(w, table, t),
        samples=w.number(table, t, "samples", integer=True, low=1),
        warmup=w.number(table, t, "warmup", integer=True, low=0),
        concurrency=concurrency,
        levels=levels,
        require_no_throttle=_flag(w, table, t, "require_no_throttle"),
        resolution=w.number(table, t, "resolution", low=0.005, high=0.5),
        category=_category(w, table, t, prompts),
        **_percentile(w, table, t),
        **_sampling(w, table, t),
        pin_accept=_pin(w, table, t),
        turns=_turns(w, table, t, prompts),
        output_given="max_tokens" in t,
    )


def _turns(w: Where, table: str, t: TomlTable, prompts: str) -> str | int | None:
    """``turns = "first" | "replay" | N``: for a prompt file's conversations and questions."""
    from pytest_specbound.measure.conversations import Turns

    if "turns" not in t:
        return None
    value = t["turns"]
    try:
        Turns.parse(value)
    except ValueError as exc:
        raise w.error(table, "turns", str(exc)) from None
    if prompts in BUILTIN or prompts.startswith("random:"):
        raise w.error(table, "turns", "applies to a prompt file's conversations: set "
                      "prompts = \"PATH\"")
    return value if isinstance(value, (str, int)) else None


def _pin(w: Where, table: str, t: TomlTable) -> float | None:
    """``pin_accept = 3.0``: at least 1 (the bonus token); a class with it has no accept band."""
    pin = w.number(table, t, "pin_accept", low=1)
    if pin is not None and "accept" in t:
        raise w.error(table, "accept", "a class with pin_accept measures the system at a fixed "
                      "accept length: the drafter's band belongs on a class without it")
    return None if pin is None else float(pin)


def _prompts(w: Where, table: str, t: TomlTable, name: str) -> str:
    """The class's prompt set: built in, a file beside the budget, a hub dataset, or random
    prompts of a set length (``{random = {input = N, output = N, ...}}``, kept as its label)."""
    from pytest_specbound.measure.random_prompts import PREFIX, RandomProblem, RandomPrompts

    value = t.get("prompts")
    if isinstance(value, dict) or (isinstance(value, str) and value.startswith(PREFIX)):
        try:
            if isinstance(value, str):
                return RandomPrompts.parse(value).label()
            if set(value) != {"random"} or not isinstance(value["random"], dict):
                raise RandomProblem("a table of prompts is {random = {input = N, output = N, "
                                    "range = R, prefix = N, seed = N}}")
            return RandomPrompts.from_table(value["random"]).label()
        except RandomProblem as exc:
            raise w.error(table, "prompts", str(exc)) from None
    prompts = w.string(table, t, "prompts") or name
    if prompts not in BUILTIN and not prompts.endswith((".jsonl", ".json")) \
            and not is_hub(prompts):
        raise w.error(table, "prompts", f"unknown prompt set '{prompts}'; valid: "
                      f"{', '.join(BUILTIN)}, a .jsonl / .json file (plain prompts, "
                      "MT-bench questions, ShareGPT conversations), hf:DATASET[:CONFIG][@SPLIT] "
                      "or {random = {input = N, output = N}}")
    if prompts.endswith((".jsonl", ".json")) and not is_hub(prompts):
        resolved = (w.path.parent / prompts)
        if not resolved.is_file():
            raise w.error(table, "prompts", f"no such file: {resolved}")
        prompts = str(resolved)
    return prompts


def _category(w: Where, table: str, t: TomlTable, prompts: str) -> tuple[str, ...]:
    category = t.get("category")
    if category is not None and (not (isinstance(category, str) and category) and not (
            isinstance(category, list) and category and all(isinstance(c, str) for c in category))):
        raise w.error(table, "category", f"a category or a list of them, got {category!r}")
    if category is not None and prompts in BUILTIN:
        raise w.error(table, "category", "selects within a prompt file: set prompts = \"PATH\"")
    return (category,) if isinstance(category, str) else tuple(category or ())


def _limits(w: Where, table: str, t: TomlTable) -> dict[str, Any]:
    """The thresholds the table sets, each checked as its spec declares."""
    out: dict[str, Any] = {}
    for spec in SPECS:
        if spec.key not in t:
            continue
        out[spec.key] = _band(w, table, t, spec) if spec.band else \
            w.number(table, t, spec.key, low=spec.low, high=spec.high)
        need = needed(spec)
        if need and not any(k in t for k in need) and "." not in table.removeprefix("classes."):
            raise w.error(table, spec.key, f"{spec.why}: set {' or '.join(need)}")
    return out


def _band(w: Where, table: str, t: TomlTable, spec: Spec) -> tuple[float, float]:
    """``[low, high]``: ordered, and ``low`` at least the spec's own minimum."""
    value = t[spec.key]
    if (not isinstance(value, list) or len(value) != 2
            or not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in value)):
        raise w.error(table, spec.key, f"must be [low, high], got {value!r}")
    if value[0] > value[1]:
        raise w.error(table, spec.key, f"reversed band [{value[0]}, {value[1]}]: low > high")
    if spec.low is not None and value[0] < spec.low:
        raise w.error(table, spec.key, f"{spec.why}: low must be >= {spec.low:g}")
    return float(value[0]), float(value[1])


def _max_tokens(w: Where, table: str, t: TomlTable, prompts: str) -> TomlTable:
    """``max_tokens = 256``, or a distribution table ``{mean = 256, stdev = 96}`` (each request
    its own draw; the mean stands for the class where one number is needed)."""
    value = t.get("max_tokens")
    if prompts.startswith("random:"):
        from pytest_specbound.measure.random_prompts import RandomPrompts

        if value is not None:
            raise w.error(table, "max_tokens", "random prompts draw their own output lengths: "
                          "set output (and range) in prompts = {random = {...}}")
        return {"max_tokens": RandomPrompts.parse(prompts).output}
    if isinstance(value, dict):
        try:
            lengths = OutputLengths.from_table(value)
        except LengthsProblem as exc:
            raise w.error(table, "max_tokens", f"{exc}; e.g. {{mean = 256, stdev = 96, "
                          f"min = 16, max = 1024}} or {{distribution = \"uniform\", min = 64, "
                          f"max = 512}}") from None
        return {"max_tokens": lengths.typical, "output_lengths": lengths}
    return {"max_tokens": w.number(table, t, "max_tokens", integer=True, low=1)
            or default_max_tokens(prompts)}


def _percentile(w: Where, table: str, t: TomlTable) -> TomlTable:
    value = w.number(table, t, "tpot_percentile", low=50, high=100)
    return {"tpot_percentile": value} if value is not None else {}


def _sampling(w: Where, table: str, t: TomlTable) -> TomlTable:
    """The class's sampling keys, checked (those not given keep their defaults)."""
    values = {"temperature": w.number(table, t, "temperature", low=0, high=5),
              "top_p": w.number(table, t, "top_p", low=0, high=1),
              "top_k": w.number(table, t, "top_k", integer=True, low=1),
              "min_p": w.number(table, t, "min_p", low=0, high=1),
              "seed": w.number(table, t, "seed", integer=True, low=0)}
    return {k: v for k, v in values.items() if v is not None}


def _flag(w: Where, table: str, t: TomlTable, key: str) -> bool:
    if key in t and not isinstance(t[key], bool):
        raise w.error(table, key, f"must be true or false, got {t[key]!r}")
    return bool(t.get(key, False))


def _concurrency(w: Where, table: str, value: Any) -> tuple[int, ...]:
    """``concurrency = 4`` or ``[1, 4, 16]``."""
    try:
        return levels(value if isinstance(value, list) else [value])
    except ValueProblem as exc:
        raise w.error(table, "concurrency", f"{exc}: a whole number or a list of them, e.g. "
                      f"[1, 4, 16]; got {value!r}") from None
