"""Budget files as pytest items: one per prompt class and concurrency level."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from pytest_specbound.gate.schema.budget import Budget

from pytest_specbound.plugin.session import VerdictFailure, outcome_for, session_of


class BudgetFile(pytest.File):
    """A budget TOML: one item per prompt class and concurrency level, named CLASS[HARDWARE]
    (CLASS[HARDWARE-cN] where the class lists levels)."""

    def collect(self) -> Iterator[pytest.Item]:
        from pytest_specbound.gate.schema.budget import load_budget

        try:
            display = str(self.path.relative_to(self.config.rootpath))
        except ValueError:
            display = str(self.path)
        budget = load_budget(self.path, display)
        session = session_of(self.config)
        hw = session.hardware
        label = hw.label if hw else "no-hw"
        for name in budget.classes:
            levels = session.levels(budget, name)
            for level in levels:
                suffix = f"-c{level}" if levels != (1,) else ""
                yield BudgetItem.from_parent(self, name=f"{name}[{label}{suffix}]", budget=budget,
                                             cls_name=name, concurrency=level)

    def repr_failure(self, excinfo: pytest.ExceptionInfo[BaseException],
                     style: Any = None) -> Any:
        from pytest_specbound.errors import SpecboundError

        if isinstance(excinfo.value, SpecboundError):
            return str(excinfo.value)
        return super().repr_failure(excinfo)


class BudgetItem(pytest.Item):
    def __init__(self, *, budget: Budget, cls_name: str, concurrency: int = 1,
                 **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.budget = budget
        self.cls_name = cls_name
        self.concurrency = concurrency
        self.add_marker(pytest.mark.specbound)

    def runtest(self) -> None:
        session = session_of(self.config)
        if session.hardware is None:
            pytest.skip(session.skip_reason())
        result = session.run(self.budget, self.cls_name, self, concurrency=self.concurrency)
        outcome_for(result.verdict, session.settings)

    def repr_failure(self, excinfo: pytest.ExceptionInfo[BaseException],
                     style: Any = None) -> Any:
        from pytest_specbound.errors import SpecboundError

        label = self.nodeid
        exc = excinfo.value
        if isinstance(exc, VerdictFailure):
            verdict = exc.args[0]
            head = "FAILED" if verdict.status == "fail" else verdict.status.upper()
            return "\n".join([f"{label} {head}", *(f"  {ln}" for ln in verdict.lines)])
        if isinstance(exc, SpecboundError):
            return f"{label} ERROR\n  {exc}"
        return super().repr_failure(excinfo)

    def reportinfo(self) -> tuple[Path, int | None, str]:
        return self.path, None, self.name  # -v shows budgets/x.toml::coding[hw], as the node id
