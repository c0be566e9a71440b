"""A comparison is a value: a reference sample fixed before this run's requests (the class
measured without speculation, or the last accepted run), the sequential tests it adds, its
evaluator, its evidence and its part of the results JSON. A :class:`ClassPlan` carries a tuple
of them; the stopping rule runs their tests and the judge their evaluators beside the class's
own thresholds (:mod:`pytest_specbound.gate.verdicts.thresholds`). The kinds:
:class:`~pytest_specbound.gate.references.against_twin.AgainstTwin`,
:class:`~pytest_specbound.gate.references.against_earlier.AgainstEarlier` and
:class:`~pytest_specbound.gate.references.against_earlier.NoEarlier`; a new kind is one new class."""

from __future__ import annotations

from typing import Protocol

from pytest_specbound.gate.verdicts.evaluate import Context, Evaluation, Limits
from pytest_specbound.gate.verdicts.result import ClassResult
from pytest_specbound.measure.measurement import Measurement
from pytest_specbound.measure.sequential import Decision, Limit
from pytest_specbound.physics.roofline import Roofline


class Comparison(Protocol):
    """What the rule, the judge and the result ask of a comparison."""

    @property
    def precise(self) -> bool:
        """Whether this run's decode rate should be known to half the resolution (a ratio to
        another sample is only as precise as both)."""
        ...

    def limits(self, limits: Limits) -> list[Limit]:
        """The one-sided tests it adds, given the class's limits."""
        ...

    def decide(self, t: Limit, m: Measurement, alpha: float, resolution: float,
               min_n: int) -> Decision:
        """One of its tests on the measurement so far."""
        ...

    def evaluate(self, c: Context) -> Evaluation | None:
        """Its finding (None: nothing to say yet)."""
        ...

    def annotate(self, result: ClassResult, roof: Roofline, m: Measurement,
                 level: float) -> ClassResult:
        """``result`` with its part of the results JSON."""
        ...
