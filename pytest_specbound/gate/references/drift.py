"""Drift between two measurements of one server: the twin without speculation measured before
the class and again after it (an A-B-A' block). A change between its two blocks is the box's
or the server's, not speculation's; it is named in the verdict, and the twin's two blocks are
pooled so the class is compared with both ends of its own minutes."""

from __future__ import annotations

import math
from dataclasses import dataclass

from pytest_specbound.measure.speedup import DraftCost, Sample, speedup
from pytest_specbound.measure.stats import Interval

DEFAULT_RECHECK = 4  # requests of the twin measured again, where that costs no relaunch on a GPU


@dataclass(frozen=True)
class Drift:
    """The twin's rate after the class over its rate before it, with its interval."""

    ratio: Interval
    before: int  # requests in each block
    after: int
    notable: float = 0.0  # the least relative move worth naming (half the class's resolution)

    @classmethod
    def between(cls, before: Sample, after: Sample, level: float,
                notable: float = 0.0) -> Drift | None:
        ratio = speedup(after.rates, before, level)
        return cls(ratio, before.n, after.n, notable) if ratio else None

    @property
    def seen(self) -> bool:
        """Whether the rate moved: the interval excludes no change, by at least ``notable``
        (a steady server's requests can be so alike that a 1% move is significant)."""
        moved = self.ratio.low > 1 or self.ratio.high < 1
        return moved and abs(math.log(self.ratio.estimate)) >= self.notable

    def text(self) -> str:
        r = self.ratio
        return f"{r.estimate - 1:+.1%} [{r.low - 1:+.1%}, {r.high - 1:+.1%}]"

    def line(self) -> str:
        return (f"drift: the twin's rate moved {self.text()} between its two blocks ({self.before}"
                f" requests before the class, {self.after} after): the box's speed or the "
                "server's, not speculation's; the speedup and the cost per draft forward are "
                "against both blocks, their intervals wider by the move")

    def to_json(self) -> dict[str, object]:
        r = self.ratio
        return {"change": round(r.estimate - 1, 4), "low": round(r.low - 1, 4),
                "high": round(r.high - 1, 4), "before": self.before, "after": self.after,
                "seen": self.seen}


def pooled(before: Sample, after: Sample) -> Sample:
    """The twin's two blocks as one sample: centred between them (where the class ran, under
    a steady drift), and as wide as the move between them."""
    return Sample(before.rates + after.rates, before.rounds_ms + after.rounds_ms,
                  before.floor_round_ms, before.roofline_tok_s, before.command)


def impossible_cost(cost: DraftCost, drift: Drift | None, rechecked: bool) -> str | None:
    """Why a cost per draft forward below zero is not physics (a draft forward costs time),
    and what was likely measured; None for a cost that is possible."""
    if cost.ms >= 0:
        return None
    head = "below zero, not physics (a draft forward costs time): "
    if drift is not None and drift.seen:
        return head + f"the box's speed moved while it was measured (the twin {drift.text()})"
    if rechecked:
        return head + ("the plain server's rounds were slower than the speculative one's less "
                       "its drafting: the box's speed moved within the class's minutes by more "
                       "than the drift check resolves, or the two servers differ in more than "
                       "speculation (threads, batch size, kernels)")
    return head + ("the twin was measured before the class with no check after it "
                   "([no_speculation] recheck measures it again): most likely the box's speed "
                   "moved between them")
