"""Against the class measured without speculation (its twin, a plan and a result of its own):
The speedup floor's two-sample test and finding, the speedup and the engine's cost per draft
forward in the results JSON (:mod:`pytest_specbound.measure.speedup` holds the statistics)."""

from __future__ import annotations

from dataclasses import dataclass, replace

from pytest_specbound.gate.references.drift import Drift, impossible_cost, pooled
from pytest_specbound.gate.schema.class_budget import ClassBudget
from pytest_specbound.gate.verdicts.evaluate import Context, Evaluation, Limits, band_text, side_of
from pytest_specbound.gate.verdicts.result import ClassResult
from pytest_specbound.gate.verdicts.thresholds import SPEEDUP
from pytest_specbound.gate.verdicts.verdict import Reason
from pytest_specbound.measure.measurement import Measurement
from pytest_specbound.measure.prefill import level_roofline
from pytest_specbound.measure.sequential import Decision, Limit, Side, Threshold
from pytest_specbound.measure.speedup import (
    Sample,
    draft_step_cost,
    spec_rates,
    spec_rounds_ms,
    speedup,
    speedup_decision,
)
from pytest_specbound.physics.roofline import Roofline, draft_forwards


def twin_sample(twin: ClassResult) -> Sample:
    """The twin's result as the sample the speculative class is compared with: its timed
    requests' decode rates and round times (one token per round), its roofline's round."""
    timed = twin.timed
    roof = twin.roofline
    round_ms = roof.round_ms if roof else 0.0
    return Sample(tuple(q.decode_tokens / q.decode_s for q in timed),
                  tuple(q.decode_s * 1e3 / q.decode_tokens for q in timed if q.decode_tokens),
                  round_ms, 1e3 / round_ms if round_ms > 0 else 0.0, twin.command)


def asks_speedup(cls: ClassBudget) -> bool:
    """Whether the class (or one of its levels) sets a speedup floor."""
    return SPEEDUP in cls.limits or any(SPEEDUP in v for v in cls.levels.values())


@dataclass(frozen=True)
class AgainstTwin:
    """Speculation against none, at the same level on the same prompts. ``rechecked``: the
    twin was measured again after the class (its blocks pooled in ``sample``), with ``drift``
    the move between them."""

    sample: Sample
    precise: bool = True
    rechecked: bool = False
    drift: Drift | None = None

    @classmethod
    def of(cls, twin: ClassResult) -> AgainstTwin:
        return cls(twin_sample(twin))

    def after(self, again: ClassResult, level: float, notable: float = 0.0) -> AgainstTwin:
        """This comparison once the twin was measured again after the class: both blocks
        pooled, the drift between them measured (named from ``notable``, a relative move)."""
        later = twin_sample(again)
        if not later.rates:
            return self
        return replace(self, sample=pooled(self.sample, later), rechecked=True,
                       drift=Drift.between(self.sample, later, level, notable))

    def limits(self, limits: Limits) -> list[Limit]:
        value = limits.get(SPEEDUP)
        return [Limit(Threshold.SPEEDUP, value)] if value is not None else []

    def decide(self, t: Limit, m: Measurement, alpha: float, resolution: float,
               min_n: int) -> Decision:
        return speedup_decision(spec_rates(m), self.sample, t.value, alpha, resolution, min_n)

    def evaluate(self, c: Context) -> Evaluation | None:
        """The speedup floor: decode with speculation over without, at this level; the drift the
        twin's check saw, named whatever the verdict."""
        limit = c.limits.get(SPEEDUP)
        s = speedup(spec_rates(c.m), self.sample, c.level)
        notes = (self.drift.line(),) if self.drift is not None and self.drift.seen else ()
        codes: tuple[Reason, ...] = ("drift",) if notes else ()
        if limit is None or s is None:
            return Evaluation(Side.OK, "speculation", notes=notes, codes=codes) if notes else None
        f = c.f
        side, evidence = side_of(Threshold.SPEEDUP, s.estimate, limit, c.decisions)
        shown = f"{s.estimate:.2f}x [{s.low:.2f}, {s.high:.2f}]"
        if side == Side.UNSURE:
            return Evaluation(Side.UNSURE, "speculation", pending=f"speedup {shown} vs min "
                              f"{limit:g}x", evidence=evidence, notes=notes, codes=codes)
        if side == Side.OK:
            return Evaluation(Side.OK, "speculation", evidence=evidence, notes=notes, codes=codes)
        band = c.limits.get("accept")
        in_band = (f"; accept {f.accept:.2f} in its band {band_text(band)}"
                   if band is not None and c.accept_in_band else f"; accept {f.accept:.2f}")
        return Evaluation(Side.BAD, "speculation", "speedup_below_min",
                          (f"speculation does not pay at c{f.concurrency}: {shown} < {SPEEDUP} "
                           f"{limit:g}x{in_band}",), evidence=evidence, notes=notes,
                          codes=codes)

    def annotate(self, result: ClassResult, roof: Roofline, m: Measurement,
                 level: float) -> ClassResult:
        """The speedup and its interval, the base's figures, and the engine's cost per draft
        forward: the round above the roofline with speculation, less the same without."""
        s = speedup(spec_rates(m), self.sample, level)
        forwards = draft_forwards(roof.spec)
        physics = (level_roofline(m, roof).round_ms if m.timed else roof.round_ms) \
            - forwards * roof.draft_step_ms
        cost = draft_step_cost(spec_rounds_ms(m), physics, self.sample, forwards, level)
        base = {**self.sample.to_json(), "rechecked": self.rechecked,
                "drift": self.drift.to_json() if self.drift else None}
        why = impossible_cost(cost, self.drift, self.rechecked) if cost else None
        return replace(result, speedup=round(s.estimate, 4) if s else None,
                       speedup_bounds=(round(s.low, 4), round(s.high, 4)) if s else None,
                       base=base,
                       draft_step_ms={**cost.to_json(), "floor_round_ms": round(physics, 4),
                                      "concurrency": result.concurrency,
                                      **({"why": why} if why else {})} if cost else None)
