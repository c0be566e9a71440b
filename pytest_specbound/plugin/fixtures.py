"""Fixtures for Python tests that use the ``specbound`` marker."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from pytest_specbound.gate.verdicts.result import ClassResult
    from pytest_specbound.physics.hardware import Hardware
    from pytest_specbound.physics.models import Model
    from pytest_specbound.physics.roofline import Roofline
    from pytest_specbound.serving.server import Server

from pytest_specbound.plugin.session import VerdictFailure, outcome_for, parse_marker, session_of


# -- fixtures for Python tests ---------------------------------------------------------------
@pytest.fixture(scope="session")
def specbound_hw(request: pytest.FixtureRequest) -> Hardware:
    """The hardware of this run (``--specbound-hw`` or NVML); skips when there is none."""
    session = session_of(request.config)
    if session.hardware is None:
        pytest.skip(session.skip_reason())
    return session.hardware


@pytest.fixture
def specbound_model(request: pytest.FixtureRequest) -> Model:
    """The target model named by the test's ``specbound`` marker (or its budget)."""
    from pytest_specbound.gate.pipeline.plan import resolve_model

    budget, _ = parse_marker(request.node, {})
    return resolve_model(budget.model, {}, budget.path.parent, budget.origin("model"))


@pytest.fixture
def specbound_roofline(request: pytest.FixtureRequest, specbound_hw: Hardware) -> Roofline:
    """The per-round roofline for the marker's model and speculative method on this hardware."""
    from pytest_specbound.gate.pipeline.plan import roofline_for

    budget, _ = parse_marker(request.node, {})
    return roofline_for(budget, specbound_hw, {})


@pytest.fixture
def specbound_server(request: pytest.FixtureRequest, specbound_hw: Hardware) -> Server:
    """The server for this test's config (one per distinct launch config per run)."""
    from pytest_specbound.gate.pipeline.plan import server_config

    session = session_of(request.config)
    budget, _ = parse_marker(request.node, {})
    server, _backend = session.pool.get(server_config(budget, session.settings))
    return server


@pytest.fixture
def specbound_concurrency() -> int | None:
    """The concurrency level of this test (parametrized when its marker lists several)."""
    return None


@pytest.fixture
def specbound_measure(request: pytest.FixtureRequest, specbound_hw: Hardware,
                      specbound_concurrency: int | None) -> Callable[..., ClassResult]:
    """``specbound_measure(prompt_class=None, **overrides)`` -> the :class:`ClassResult`.

    It measures at the test's level: the parametrized one where the marker lists several, else
    the marker's (or a call-time ``concurrency=N``) single level.
    """
    session = session_of(request.config)

    def run(prompt_class: str | None = None, **overrides: Any) -> ClassResult:
        if prompt_class:
            overrides["prompt_class"] = prompt_class
        from pytest_specbound.errors import SpecboundError

        try:
            budget, name = parse_marker(request.node, overrides)
        except pytest.UsageError as exc:
            pytest.fail(str(exc), pytrace=False)
        levels = session.levels(budget, name)
        if "concurrency" in overrides and specbound_concurrency is None:
            levels = budget.classes[name].concurrency
        if specbound_concurrency is not None and "concurrency" not in overrides:
            level = specbound_concurrency
        elif len(levels) == 1:
            level = levels[0]
        else:
            pytest.fail(f"{request.node.nodeid}: specbound_measure: concurrency {list(levels)} "
                        "lists several levels; give one at call time (concurrency=4) or list "
                        "them on the marker (one test per level)", pytrace=False)
        try:
            return session.run(budget, name, request.node, concurrency=level)
        except SpecboundError as exc:
            pytest.fail(f"specbound: {exc}", pytrace=False)

    return run


@pytest.fixture
def specbound_check(request: pytest.FixtureRequest) -> Callable[[ClassResult], None]:
    """``specbound_check(result)`` fails the test with the verdict text (no traceback)."""
    session = session_of(request.config)

    def check(result: ClassResult) -> None:
        verdict = result.verdict
        try:
            outcome_for(verdict, session.settings)
        except VerdictFailure:
            pytest.fail("\n".join(verdict.lines), pytrace=False)

    return check
