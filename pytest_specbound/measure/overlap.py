"""How many requests were in flight, and decoding, while each request decoded.

Every record with a send time has a span (sent to last token) and a decode window (first token to
last token) on its level's clock. Two step functions of time follow from all records of a level:
``in_flight(t)``, the spans covering t, and ``decoding(t)``, the decode windows covering t. For
each record this module integrates them over its decode window:

- ``in_flight``: mean of in_flight(t) over the window (the load the closed loop held);
- ``co_decoding``: mean of decoding(t) (how many sequences the server decoded at once);
- ``share_s``: the integral of 1 / decoding(t), the wall time that is this request's share of
  the decoding the server did. The shares of all requests add up to the wall time in which
  anything decoded, so tokens over summed shares is the aggregate decode rate;
- ``prefill_tokens``: the other requests' prompt tokens computed while it decoded. A continuous-
  batching server puts a newcomer's prompt into the running rounds, so they take longer for
  everyone decoding; each prompt is spread evenly over its prefill window (sent to first
  token), and only where the server says how many prompt tokens it computed.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from dataclasses import dataclass

from pytest_specbound.serving.records import RequestRecord


@dataclass(frozen=True)
class Overlap:
    in_flight: float
    co_decoding: float
    share_s: float
    prefill_tokens: float = 0.0


class _Step:
    """A step function: the number of intervals covering t (or the sum of their ``weights``),
    with prefix integrals of the count and of its inverse (zero where nothing covers t)."""

    def __init__(self, intervals: Sequence[tuple[float, float]],
                 weights: Sequence[float] | None = None) -> None:
        deltas: dict[float, float] = {}
        for (a, b), w in zip(intervals, weights or [1.0] * len(intervals), strict=True):
            if b > a:
                deltas[a] = deltas.get(a, 0.0) + w
                deltas[b] = deltas.get(b, 0.0) - w
        self.points = sorted(deltas)
        self.counts: list[float] = []  # on [points[m], points[m + 1])
        level = 0.0
        for p in self.points:
            level += deltas[p]
            self.counts.append(level)
        self.prefix = {False: [0.0], True: [0.0]}
        for m in range(len(self.points) - 1):
            width = self.points[m + 1] - self.points[m]
            for inverse in (False, True):
                self.prefix[inverse].append(self.prefix[inverse][-1]
                                            + self._rate(m, inverse) * width)

    def _rate(self, m: int, inverse: bool) -> float:
        k = self.counts[m]
        if not inverse:
            return k
        return 1.0 / k if k > 0.5 else 0.0  # counts: 0 where nothing covers t

    def _upto(self, x: float, inverse: bool) -> float:
        prefix = self.prefix[inverse]
        if not self.points or x <= self.points[0]:
            return 0.0
        m = bisect.bisect_right(self.points, x) - 1
        if m >= len(self.points) - 1:
            return prefix[-1]
        return prefix[m] + self._rate(m, inverse) * (x - self.points[m])

    def integral(self, a: float, b: float, inverse: bool = False) -> float:
        """The integral over [a, b] of the count (or of 1 / count)."""
        return self._upto(b, inverse) - self._upto(a, inverse)


def overlaps(records: Sequence[RequestRecord],
             others: Sequence[RequestRecord] = ()) -> list[Overlap | None]:
    """Per record of ``records`` (None where it has no send time or no decode window); ``others``
    (untimed, drained) loaded the server too and count in the step functions."""
    everyone = [*records, *others]
    spans = [s for s in (r.span for r in everyone) if s]
    windows = [w for w in (r.decode_window for r in everyone) if w]
    load, decoding = _Step(spans), _Step(windows)
    prompts = [(p, _density(r, p)) for r in everyone if (p := r.prefill_window)]
    prefill = _Step([p for p, _ in prompts], [d for _, d in prompts])
    out: list[Overlap | None] = []
    for r in records:
        w = r.decode_window
        if w is None or w[1] <= w[0]:
            out.append(None)
            continue
        length = w[1] - w[0]
        p = r.prefill_window  # its own prompt, where its window reaches into its decode
        own = max(0.0, min(w[1], p[1]) - max(w[0], p[0])) * _density(r, p) if p else 0.0
        out.append(Overlap(load.integral(*w) / length, decoding.integral(*w) / length,
                           decoding.integral(*w, inverse=True),
                           max(0.0, prefill.integral(*w) - own)))
    return out


def _density(r: RequestRecord, window: tuple[float, float]) -> float:
    """Prompt tokens per second the server computed over ``r``'s prefill ``window``."""
    return (r.computed_prompt_tokens or 0) / (window[1] - window[0])
