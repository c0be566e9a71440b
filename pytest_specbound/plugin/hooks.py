"""The plugin's hooks, for a ``conftest.py`` or another plugin to implement (as
pytest-benchmark's ``pytest_benchmark_update_machine_info`` and ``..._update_json``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from pytest_specbound.gate.pipeline.run import ReferenceFactory

@pytest.hookspec
def pytest_specbound_update_identity(config: pytest.Config, identity: dict[str, object]) -> None:
    """Add to (or change) this run's identity, taken once at the first results write: the
    machine, commit and version a baseline names and compares (``identity["runner"] =
    os.environ["RUNNER_NAME"]``)."""


@pytest.hookspec
def pytest_specbound_update_json(config: pytest.Config, output_json: dict[str, object]) -> None:
    """Add to (or change) the results JSON before each write (partial ones too): the whole
    document, ``output_json["results"]`` one entry per class and level."""


@pytest.hookspec
def pytest_specbound_add_references(config: pytest.Config,
                                    references: dict[str, ReferenceFactory]) -> None:
    """Add, replace or remove the references classes are compared with: ``references[name] =
    factory``, a factory taking the run's
    :class:`~pytest_specbound.gate.pipeline.run.RunContext` and giving a
    :class:`~pytest_specbound.gate.references.reference.Reference` (or None: not this run).
    Called once, before the first class is planned."""
