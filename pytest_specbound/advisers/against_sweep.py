"""A speculation plan held against a brute-force sweep: every K launched and measured at every
level (as ``vllm bench sweep`` does it), the plan's K against the sweep's best, and where they
differ the two measured side by side (bench/spec_plan_sweep.py, the real-server tests)."""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace

from pytest_specbound.advisers.spec_plan import Measured
from pytest_specbound.advisers.spec_sweep import Measurer, Say, SpecPlan, measured_from
from pytest_specbound.errors import ConfigError
from pytest_specbound.gate.pipeline.pool import ServerPool
from pytest_specbound.gate.schema.budget import Budget
from pytest_specbound.gate.schema.settings import Settings
from pytest_specbound.physics.hardware import Hardware

Points = dict[int, dict[int, Measured]]  # K -> level -> measured (K = 0: the twin)


def sweep_point(m: Measurer, k: int, levels: Sequence[int]) -> dict[int, Measured]:
    """One point of a sweep: K (0: the twin) launched and measured at every level."""
    if k == 0:
        base = m.twin(levels)
        return {level: measured_from(base[level], 0) for level in levels}
    return {level: measured_from(m.at(k, level), k) for level in levels}


def sweep(budget: Budget, name: str, hw: Hardware, settings: Settings, pool: ServerPool,
          steps: Iterable[int], levels: Sequence[int], say: Say | None = None
          ) -> tuple[Points, int, int]:
    """Every K measured at every level (K = 0: the twin), as a sweep does it: (K -> level ->
    measured, launches, requests)."""
    m = Measurer(budget, name, hw, settings, pool, say)
    found = {k: sweep_point(m, k, levels) for k in (0, *(k for k in steps if k))}
    pool.stop_launched()
    return found, m.launches, m.requests


AGREE = 0.95  # the plan's K agrees with the sweep's best within 5%
REFEREE_ROUNDS = 2  # of A B B A at most, the second where the first left the 5% undecided


@dataclass(frozen=True)
class HeadToHead:
    """Two step counts measured in alternating blocks at one level, A B B A (a drift in the
    box's speed that is linear over the four cancels), once or more: each block's per-user
    decode rate, in order (the plan's K's blocks in one tuple, the sweep's in the other)."""

    concurrency: int
    plan_k: int
    sweep_k: int
    plan_rates: tuple[float, ...]
    sweep_rates: tuple[float, ...]
    # each block's accept length (None where the server gave none: K = 0): the same prompts at
    # the same K read the same acceptance, so a block that ran the wrong server shows here
    plan_accepts: tuple[float | None, ...] = ()
    sweep_accepts: tuple[float | None, ...] = ()

    @property
    def ratio(self) -> float:
        """The plan's K's rate over the sweep's best K's, the blocks pooled."""
        return sum(self.plan_rates) / sum(self.sweep_rates)

    @property
    def pairs(self) -> tuple[float, ...]:
        """Each plan block over its neighbouring sweep block (A B, then B A, each round)."""
        return tuple(a / b for a, b in zip(self.plan_rates, self.sweep_rates, strict=True))

    @property
    def ratio_bounds(self) -> tuple[float, float]:
        """The lowest and highest of :attr:`pairs`: how far the box moved the ratio."""
        return min(self.pairs), max(self.pairs)

    @property
    def undecided(self) -> bool:
        """Its pairs fall on both sides of 5% below the sweep's best, and the pooled ratio under
        it: the box moved the verdict, and another round may settle it."""
        low, high = self.ratio_bounds
        return self.ratio < AGREE and low < AGREE <= high


def head_to_head(m: Measurer, ks: tuple[int, int], level: int,
                 requests: int = 6, max_rounds: int = 1) -> HeadToHead:
    """The plan's K (``ks[0]``) and the sweep's best (``ks[1]``) side by side at one level:
    ``requests`` per stream of each (so each user sees as many whole requests at every level)
    in the order A B B A; on the CPU both servers stay up for the four, launched and warmed by
    two unmeasured requests per stream first (K = 0: the twin). Up to ``max_rounds`` of the
    four while the verdict is :attr:`HeadToHead.undecided`."""
    m.keep_up = True
    if m.twins.servers_fit_together:  # both launched and warmed first, neither block cold
        for k in ks:
            m.block(k, level, 2 * level)
    rates: dict[int, list[float]] = {k: [] for k in ks}
    accepts: dict[int, list[float | None]] = {k: [] for k in ks}
    for _ in range(max_rounds):
        for k in (ks[0], ks[1], ks[1], ks[0]):
            found = m.block(k, level, requests * level)
            if found is None or found.decode_tok_s is None:
                raise ConfigError(f"{m.name} at K={k}, concurrency {level}: no request was "
                                  "timed")
            rates[k].append(found.decode_tok_s)
            accepts[k].append(found.accept_length)
        side = HeadToHead(level, ks[0], ks[1], tuple(rates[ks[0]]), tuple(rates[ks[1]]),
                          tuple(accepts[ks[0]]), tuple(accepts[ks[1]]))
        if not side.undecided:
            break
    m.pool.stop_launched()
    return side


@dataclass(frozen=True)
class AgainstSweep:
    """One level of a plan held against a sweep of every K: the sweep's best K and speedup,
    the plan's K and the sweep's own speedup there (the same run's conditions), and its ratio
    to the best."""

    concurrency: int
    sweep_k: int
    sweep_speedup: float
    plan_k: int
    plan_speedup: float  # the sweep's measured speedup at the plan's K (1.0 at K = 0)
    indistinct: bool = False  # the sweep's own intervals at the two K overlap
    referee: HeadToHead | None = None  # the two K side by side, where they differ

    @property
    def ratio(self) -> float:
        return self.plan_speedup / self.sweep_speedup if self.sweep_speedup > 0 else math.nan

    @property
    def judged_ratio(self) -> float:
        """The plan's K over the sweep's best side by side (the A B B A blocks, where they were
        run), else in the sweep itself."""
        return self.referee.ratio if self.referee is not None else self.ratio

    @property
    def agrees(self) -> bool:
        """The same K; else within 5% of the sweep's best (:attr:`judged_ratio`)."""
        return self.plan_k == self.sweep_k or self.judged_ratio >= AGREE


def against_sweep(plan: SpecPlan, points: Points) -> list[AgainstSweep]:
    """Per level: the plan's recommendation against the sweep's best (K = 0 counts: a sweep
    may find that no speculation is best)."""
    out = []
    for level in plan.levels:
        c = level.concurrency
        base = points[0][c].rate
        best = max(points, key=lambda k: points[k][c].rate)
        k = level.recommended
        found = points.get(k, {}).get(c)
        top = points[best][c]
        overlap = found is not None and found.rate_bounds[1] >= top.rate_bounds[0]
        out.append(AgainstSweep(c, best, top.rate / base, k,
                                found.rate / base if found else math.nan, overlap))
    return out


def referee(budget: Budget, name: str, hw: Hardware, settings: Settings, pool: ServerPool,
            rows: Sequence[AgainstSweep], requests: int = 6,
            say: Say | None = None) -> list[AgainstSweep]:
    """Each level where the plan's K and the sweep's best differ, the two measured side by side
    (:func:`head_to_head`, ``requests`` per stream a block, a second A B B A where the first
    left the 5% undecided): a sweep's best on a noisy box may be its luckiest point."""
    return [replace(r, referee=head_to_head(Measurer(budget, name, hw, settings, pool, say),
                                            (r.plan_k, r.sweep_k), r.concurrency, requests,
                                            REFEREE_ROUNDS))
            if r.plan_k != r.sweep_k else r for r in rows]
