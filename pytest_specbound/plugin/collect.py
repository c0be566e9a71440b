"""Collection hooks (a registered plugin object): budget files become items, every marker is
parsed before the run starts, and the session learns which budget items it will run."""

from __future__ import annotations

from pathlib import Path

import pytest

from pytest_specbound.plugin.items import BudgetFile, BudgetItem
from pytest_specbound.plugin.session import SpecboundSession, parse_marker


class Collection:
    """What pytest collects for specbound, for one session."""

    def __init__(self, session: SpecboundSession) -> None:
        self.session = session

    def pytest_collect_file(self, file_path: Path, parent: pytest.Collector) -> pytest.File | None:
        if file_path.suffix != ".toml" or not self._is_budget(file_path):
            return None
        return BudgetFile.from_parent(parent, path=file_path)

    def _is_budget(self, path: Path) -> bool:
        config = self.session.config
        args = [Path(a.split("::")[0]).resolve() for a in config.args]
        if path.resolve() in args:
            return True
        root = config.rootpath
        for entry in self.session.settings.budgets:
            base = (root / entry).resolve()
            if base == path.resolve() or base in path.resolve().parents:
                return True
        return False

    @pytest.hookimpl(tryfirst=True)
    def pytest_collection_modifyitems(self, items: list[pytest.Item]) -> None:
        """Every marker is parsed here, as a budget, so a bad one stops the run at once."""
        errors = []
        for item in items:
            if isinstance(item, BudgetItem):
                continue
            mark = item.get_closest_marker("specbound")
            if mark is None:
                continue
            if mark.args:
                errors.append(f"{item.nodeid}: specbound: takes keywords only, got positional "
                              f"arguments {mark.args!r}")
                continue
            try:
                parse_marker(item, {})
            except pytest.UsageError as exc:
                errors.append(str(exc))
        if errors:
            raise pytest.UsageError("\n".join(errors))

    def pytest_collection_finish(self, session: pytest.Session) -> None:
        """The items that will run (after -k / -m deselection): the classes the gate plans."""
        self.session.wanted = [(item.budget, item.cls_name, item.concurrency)
                               for item in session.items if isinstance(item, BudgetItem)]
