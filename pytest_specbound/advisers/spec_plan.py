"""Which draft length at which load: the decode rate and speedup of every step count K predicted
from the twin (K = 0) and two measured step counts at one concurrency level, the K to run there
(or none), and the confirming measurement held against its prediction.

The model, per level (docs/speedup.md):

- a round at K costs the roofline's round at K (the target's verify over K + 1 tokens at this
  batch, the drafter's own reads) plus the engine's excess without speculation (the twin's
  measured round less its roofline) plus a draft cost above the roofline in two parts, a fixed
  part per drafting round and a part per draft forward (for n-gram lookup, per drafted token),
  fitted on the two measured step counts (a negative slope is not physics: all fixed then);
- the accept length at K is 1 plus the unconditional acceptance of each draft position up to K:
  measured per position where the server counts them (vLLM's acceptance histogram), else
  ``first x decay^(i - 1)`` fitted on the two measured accept lengths;
- decode rate = accept / round, speedup = rate / the twin's rate; the intervals come from
  drawing the three measurements within their own intervals (normal, at their confidence
  level) and carrying each draw through the same fit.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from statistics import NormalDist

DRAWS = 2000
CONFIDENCE = 0.9


@dataclass(frozen=True)
class Measured:
    """One measured step count at one level: per-user decode rate and accept length, each with
    its interval at ``confidence``; ``positions``: the acceptance of draft positions 1..K per
    round that drafted, where the server counted them; ``idle``: the share of decode tokens
    from rounds that drafted nothing (a lookup drafter that found no match)."""

    steps: int  # K; 0: the twin without speculation
    rate: float
    rate_bounds: tuple[float, float]
    accept: float = 1.0
    accept_bounds: tuple[float, float] = (1.0, 1.0)
    confidence: float = CONFIDENCE
    positions: tuple[float, ...] = ()
    idle: float = 0.0

    def draw(self, rng: random.Random) -> tuple[float, float]:
        """(rate, accept) drawn within their intervals (normal, clipped to the physical)."""
        return (max(1e-9, _normal(rng, self.rate, self.rate_bounds, self.confidence)),
                max(1.0, _normal(rng, self.accept, self.accept_bounds, self.confidence)))


def _normal(rng: random.Random, mid: float, bounds: tuple[float, float], level: float) -> float:
    z = NormalDist().inv_cdf(0.5 + level / 2)
    sd = (bounds[1] - bounds[0]) / (2 * z) if z > 0 else 0.0
    return rng.gauss(mid, sd) if sd > 0 else mid


@dataclass(frozen=True)
class Acceptance:
    """Acceptance of draft position i (1-based) per drafting round: the measured ones, then
    each further position ``decay`` times the one before; ``idle``: the share of tokens from
    rounds that drafted nothing (the same share of the text at every K: where a lookup finds
    no match); ``how`` says which."""

    first: float
    decay: float
    measured: tuple[float, ...] = ()
    how: str = ""
    idle: float = 0.0

    def position(self, i: int) -> float:
        if i <= len(self.measured):
            return self.measured[i - 1]
        last, at = (self.measured[-1], len(self.measured)) if self.measured else (self.first, 1)
        return min(1.0, max(0.0, last * self.decay ** (i - at)))

    def accept(self, steps: int) -> float:
        """Tokens per round at ``steps``: a drafting round's bonus token plus each position's
        acceptance, averaged with the rounds that drafted nothing (one token each) over the
        tokens each kind emits."""
        drafting = 1.0 + sum(self.position(i) for i in range(1, steps + 1))
        return 1.0 / (self.idle + (1.0 - self.idle) / drafting)


def fit_acceptance(points: Sequence[tuple[int, float]],
                   positions: Sequence[float] = (), idle: float = 0.0) -> Acceptance:
    """From (K, accept length) at two step counts: ``first x decay^(i-1)`` through both
    (decay in (0, 1]: the ratio of the accepted drafts beyond the first K to those within it
    sets it); with ``positions`` (measured, per position) those are kept and the decay is their
    last ratio (and ``idle``, the share of tokens from rounds that drafted nothing, kept)."""
    if positions:
        tail = [p for p in positions if p > 0]
        decay = tail[-1] / tail[-2] if len(tail) >= 2 else 1.0
        idle_note = f"; {idle:.0%} of tokens from rounds that drafted nothing" if idle else ""
        return Acceptance(positions[0], min(1.0, decay), tuple(positions),
                          f"measured per position 1-{len(positions)}, then x{min(1.0, decay):.2f} "
                          f"each{idle_note}", idle)
    (k1, a1), (k2, a2) = sorted(points)[:2]
    if k2 <= k1 or a1 <= 1.0:
        first = (a1 - 1.0) / k1 if k1 else 0.0
        return Acceptance(min(1.0, first), 1.0, how="one step count: every position alike "
                                                      "[assumed]")
    ratio = max(1.0, (a2 - 1.0) / (a1 - 1.0))

    def grows(decay: float) -> float:  # (a2 - 1) / (a1 - 1) at this decay
        return _geometric(decay, k2) / _geometric(decay, k1)

    if ratio >= grows(1.0):
        decay = 1.0
    else:
        lo, hi = 0.0, 1.0
        for _ in range(60):
            mid = (lo + hi) / 2
            lo, hi = (mid, hi) if grows(mid) < ratio else (lo, mid)
        decay = (lo + hi) / 2
    first = min(1.0, (a1 - 1.0) / _geometric(decay, k1))
    return Acceptance(first, decay, how=f"fitted on K={k1} and K={k2}: position 1 accepted "
                                        f"{first:.2f}, each next x{decay:.2f}")


def _geometric(decay: float, k: int) -> float:
    return float(k) if decay >= 1.0 else (1 - decay ** k) / (1 - decay)


@dataclass(frozen=True)
class DraftCost:
    """The engine's draft cost above the roofline: ``fixed_ms`` per drafting round plus
    ``per_unit_ms`` per draft forward (per drafted token for lookup drafters)."""

    fixed_ms: float
    per_unit_ms: float

    def ms(self, units: int) -> float:
        return self.fixed_ms + self.per_unit_ms * units


def fit_cost(points: Sequence[tuple[int, float]]) -> DraftCost:
    """Through (units, excess ms) at two step counts; a negative slope is not physics: the mean,
    all fixed."""
    (u1, e1), (u2, e2) = sorted(points)[:2]
    if u2 == u1:
        return DraftCost((e1 + e2) / 2, 0.0)
    slope = (e2 - e1) / (u2 - u1)
    if slope < 0:
        return DraftCost((e1 + e2) / 2, 0.0)
    return DraftCost(e1 - slope * u1, slope)


@dataclass(frozen=True)
class Prediction:
    """One step count at one level: decode rate and speedup (median of the draws) with their
    intervals, the accept length and the round."""

    steps: int
    rate: float
    rate_bounds: tuple[float, float]
    speedup: float
    speedup_bounds: tuple[float, float]
    accept: float
    round_ms: float

    def to_json(self) -> dict[str, object]:
        return {"steps": self.steps, "decode_tok_s": round(self.rate, 2),
                "decode_tok_s_bounds": [round(x, 2) for x in self.rate_bounds],
                "speedup": round(self.speedup, 4),
                "speedup_bounds": [round(x, 4) for x in self.speedup_bounds],
                "accept_length": round(self.accept, 3), "round_ms": round(self.round_ms, 3)}


@dataclass(frozen=True)
class Confirmation:
    """The recommended K measured once more, against its prediction."""

    measured: Measured
    speedup: float | None = None

    def landed(self, predicted: Prediction) -> bool:
        low, high = predicted.rate_bounds
        return low <= self.measured.rate <= high


@dataclass(frozen=True)
class LevelPlan:
    """Every K's prediction at one level, the K recommended (0: speculation does not pay) and
    how the fits came out."""

    concurrency: int
    base: Measured
    measured: tuple[Measured, ...]
    predictions: tuple[Prediction, ...]
    acceptance: Acceptance
    cost: DraftCost
    unit: str  # what the draft cost's slope is per: "draft forward" or "drafted token"
    confirmation: Confirmation | None = None
    base_drift: float | None = None  # the twin after the step counts over before, less 1
    base_blocks: int = 1  # the twin's blocks pooled (3: its first two disagreed, measured again)

    @property
    def best(self) -> Prediction:
        return max(self.predictions, key=lambda p: p.rate)

    @property
    def recommended(self) -> int:
        """The K with the highest predicted rate; 0 where its speedup is at most 1."""
        best = self.best
        return best.steps if best.speedup > 1.0 else 0

    def at(self, steps: int) -> Prediction | None:
        return next((p for p in self.predictions if p.steps == steps), None)

    def to_json(self) -> dict[str, object]:
        data: dict[str, object] = {
            "concurrency": self.concurrency, "recommended_steps": self.recommended,
            "base_decode_tok_s": round(self.base.rate, 2),
            "measured": [{"steps": m.steps, "decode_tok_s": round(m.rate, 2),
                          "accept_length": round(m.accept, 3)} for m in self.measured],
            "acceptance": {"first": round(self.acceptance.first, 4),
                           "decay": round(self.acceptance.decay, 4),
                           "positions": [round(x, 4) for x in self.acceptance.measured],
                           "idle": round(self.acceptance.idle, 4),
                           "how": self.acceptance.how},
            "draft_cost_ms": {"fixed": round(self.cost.fixed_ms, 4),
                              "per_unit": round(self.cost.per_unit_ms, 4), "unit": self.unit},
            "base_drift": None if self.base_drift is None else round(self.base_drift, 4),
            "base_blocks": self.base_blocks,
            "predictions": [p.to_json() for p in self.predictions]}
        if self.confirmation is not None:
            c = self.confirmation
            predicted = self.at(c.measured.steps)
            data["confirmation"] = {
                "steps": c.measured.steps, "decode_tok_s": round(c.measured.rate, 2),
                "decode_tok_s_bounds": [round(x, 2) for x in c.measured.rate_bounds],
                "speedup": None if c.speedup is None else round(c.speedup, 4),
                "landed": None if predicted is None else c.landed(predicted)}
        return data


@dataclass(frozen=True)
class RoundModel:
    """The physics at one level: ``roof_ms(K)``, the roofline's round at K at this level's
    batch; ``units(K)``, the draft cost's units at K (draft forwards, or drafted tokens), and
    what a unit is."""

    roof_ms: Callable[[int], float]
    units: Callable[[int], int] = lambda k: k
    unit: str = "draft forward"


def predict_level(concurrency: int, base: Measured, measured: Sequence[Measured],
                  model: RoundModel, steps: Sequence[int], draws: int = DRAWS,
                  confidence: float = CONFIDENCE, seed: int = 0) -> LevelPlan:
    """Every K in ``steps`` predicted at one level from the twin ``base`` and two ``measured``
    step counts."""
    roof_ms, units, unit = model.roof_ms, model.units, model.unit
    if len(measured) < 2 or len({m.steps for m in measured}) < 2:
        raise ValueError("the plan needs two distinct measured step counts")
    two = sorted(measured, key=lambda m: m.steps)[:2]
    counted = max(two, key=lambda m: len(m.positions))
    positions = (counted.positions, counted.idle)
    rng = random.Random(seed)
    roofs = {k: roof_ms(k) for k in {0, *steps, *(m.steps for m in two)}}
    samples: dict[int, list[tuple[float, float]]] = {k: [] for k in steps}
    point = _one(base.rate, [(m.steps, m.rate, m.accept) for m in two], positions, roofs, units,
                 steps)
    for _ in range(draws):
        r0, _a0 = base.draw(rng)
        drawn = [(m.steps, *m.draw(rng)) for m in two]
        for k, (rate, speedup, _) in _one(r0, drawn, positions, roofs, units, steps)[0].items():
            samples[k].append((rate, speedup))
    low_q, high_q = (1 - confidence) / 2, 1 - (1 - confidence) / 2
    predictions = []
    for k in steps:
        rates = sorted(r for r, _ in samples[k])
        ups = sorted(s for _, s in samples[k])
        predictions.append(Prediction(
            k, _quantile(rates, 0.5), (_quantile(rates, low_q), _quantile(rates, high_q)),
            _quantile(ups, 0.5), (_quantile(ups, low_q), _quantile(ups, high_q)),
            point[1].accept(k), point[0][k][2]))
    return LevelPlan(concurrency, base, tuple(two), tuple(predictions), point[1], point[2], unit)


def _one(r0: float, points: Sequence[tuple[int, float, float]],
         positions: tuple[Sequence[float], float],
         roofs: Mapping[int, float], units: Callable[[int], int], steps: Sequence[int]
         ) -> tuple[dict[int, tuple[float, float, float]], Acceptance, DraftCost]:
    """One draw through the fits: K -> (rate, speedup, round ms), and the fits themselves."""
    excess = 1e3 / r0 - roofs[0]
    acceptance = fit_acceptance([(k, a) for k, _, a in points], *positions)
    cost = fit_cost([(units(k), 1e3 * a / r - roofs[k] - excess) for k, r, a in points])
    out = {}
    for k in steps:
        round_ms = roofs[k] + excess + (cost.ms(units(k)) if k else 0.0)  # K=0: no drafting
        rate = 1e3 * acceptance.accept(k) / round_ms if round_ms > 0 else math.inf
        out[k] = (rate, rate / r0, round_ms)
    return out, acceptance, cost


def _quantile(values: Sequence[float], q: float) -> float:
    if not values:
        return math.nan
    i = min(len(values) - 1, max(0, round(q * (len(values) - 1))))
    return values[i]
