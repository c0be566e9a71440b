"""A reference: a sample measured or read once per run that classes are compared against (the
class without speculation, the last accepted run; another engine or release is one more). The
run asks each reference in its table (:data:`pytest_specbound.gate.pipeline.run.REFERENCES`)
which classes it wants, lets it measure or read them once, before the first speculative
measurement, and adds the comparison it makes to each class's plan; a reference that can be
measured again after its class (the drift check) says how many requests."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from pytest_specbound.errors import SpecboundError
from pytest_specbound.gate.references.comparison import Comparison
from pytest_specbound.gate.schema.budget import Budget
from pytest_specbound.gate.schema.class_budget import ClassBudget

Wanted = tuple[Budget, str, int]  # a budget (on this run's hardware), one of its classes, a level


class Planned(Protocol):
    """What a reference reads of a class's plan."""

    @property
    def budget(self) -> Budget: ...

    @property
    def cls(self) -> ClassBudget: ...

    @property
    def concurrency(self) -> int: ...

    @property
    def hardware(self) -> str: ...

    @property
    def resolution(self) -> float: ...


class Reference(Protocol):
    """A sample to compare classes against, made once per run."""

    def wants(self, budget: Budget, name: str) -> bool:
        """Whether the class is compared with this reference."""
        ...

    def prepare(self, wanted: Sequence[Wanted]) -> None:
        """Measure or read the reference of every wanted class, once per run (across
        pytest-xdist workers through a :class:`~pytest_specbound.gate.references.store.
        ReferenceStore`)."""
        ...

    def comparison(self, plan: Planned) -> Comparison:
        """The comparison the class's plan carries (a ServerError where there is none)."""
        ...

    def recheck_requests(self, plan: Planned) -> int:
        """Requests to measure the reference again after the class (0: no recheck)."""
        ...

    def recheck(self, plan: Planned, requests: int, level: float) -> Comparison | SpecboundError:
        """The reference measured again after its class: the comparison with both blocks
        (``level``: the confidence of the class's last look)."""
        ...
