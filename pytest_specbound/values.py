"""The rules for values a user types, written once: numbers, whole numbers and concurrency
levels, for the command line, the plugin's options and budget files alike. Each rule raises
:class:`ValueProblem` saying what was expected; the caller names where the value came from."""

from __future__ import annotations

from collections.abc import Sequence

MAX_CONCURRENCY = 1024  # closed-loop streams per level (budget key, flags, specbound measure)
# the relative miss of a threshold the sequential verdict is sized to catch, unless set
DEFAULT_RESOLUTION = 0.05
DEFAULT_CONFIDENCE = 0.95  # the verdict intervals' level, unless set


class ValueProblem(ValueError):
    """What is wrong with a value, without where it came from."""


def whole_number(text: str, low: int) -> int:
    try:
        value = int(text)
    except ValueError:
        raise ValueProblem(f"expected a whole number >= {low}") from None
    if value < low:
        raise ValueProblem(f"expected a whole number >= {low}")
    return value


def number(text: str, low: float, high: float | None = None, open_low: bool = False) -> float:
    """A finite number above ``low`` (at least, unless ``open_low``) and below ``high``."""
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if value != value or (value <= low if open_low else value < low) or (
            high is not None and value >= high) or value in (float("inf"), float("-inf")):
        if high is not None:
            raise ValueProblem(f"expected a number in ({low:g}, {high:g})")
        raise ValueProblem(f"expected a number {'>' if open_low else '>='} {low:g}")
    return value


def levels(items: Sequence[object]) -> tuple[int, ...]:
    """Concurrency levels: distinct whole numbers in [1, MAX_CONCURRENCY]."""
    good = bool(items) and all(isinstance(v, int) and not isinstance(v, bool)
                               and 1 <= v <= MAX_CONCURRENCY for v in items)
    if not good:
        raise ValueProblem(f"expected distinct whole numbers in [1, {MAX_CONCURRENCY}]")
    if len(set(items)) != len(items):
        raise ValueProblem(f"expected distinct whole numbers in [1, {MAX_CONCURRENCY}] "
                           "(a level is repeated)")
    return tuple(int(v) for v in items)  # type: ignore[call-overload]


def levels_text(text: str) -> tuple[int, ...]:
    """``1,4,16`` -> (1, 4, 16)."""
    parts = [p.strip() for p in text.split(",")]
    return levels([int(p) if p.isdigit() else p for p in parts])
