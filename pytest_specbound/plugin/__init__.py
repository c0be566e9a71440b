"""pytest glue: options and configuration here; the run's state and session hooks in
``session``, budget files as items in ``items`` (collected by ``collect``), the marker's
fixtures in ``fixtures``.

Import-light on purpose: pytest imports this package in every session of every project that has
it installed, so everything beyond ``settings`` is imported inside the hooks that use it.
"""

from __future__ import annotations

import os
from typing import Any

import pytest

from pytest_specbound.gate.schema.settings import OPTIONS, resolve
from pytest_specbound.plugin.collect import Collection
from pytest_specbound.plugin.fixtures import (
    specbound_check,
    specbound_concurrency,
    specbound_hw,
    specbound_measure,
    specbound_model,
    specbound_roofline,
    specbound_server,
)
from pytest_specbound.plugin.session import SESSION, SpecboundSession, XdistSharing

__all__ = ["specbound_check", "specbound_concurrency", "specbound_hw", "specbound_measure",
           "specbound_model", "specbound_roofline", "specbound_server"]


def pytest_addhooks(pluginmanager: pytest.PytestPluginManager) -> None:
    from pytest_specbound.plugin import hooks

    pluginmanager.add_hookspecs(hooks)


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("specbound", "roofline-derived performance gates (pytest-specbound)")
    for opt in OPTIONS:
        env = f" [env {opt.env}]" if opt.env else ""
        default = f" (default {opt.default})" if opt.default else ""
        if opt.switch:  # on when given (None when not, so the environment and ini still count)
            group.addoption(opt.flag, dest=opt.name, default=None, action="store_const",
                            const="1", help=opt.help + env)
        else:
            group.addoption(opt.flag, dest=opt.name, default=None,
                            help=opt.help + env + default)
        if opt.name == "specbound_budgets":
            parser.addini(opt.name, opt.help, type="args")
        else:
            parser.addini(opt.name, opt.help)


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "specbound(prompt_class=..., accept=(lo, hi), any class key or threshold=..., "
        "prompts=..., max_tokens=..., server=..., budget=...): a roofline-derived performance "
        "gate for the specbound_measure / specbound_check fixtures",
    )
    from pytest_specbound.errors import ConfigError

    cli = {opt.name: config.getoption(opt.name) for opt in OPTIONS}
    try:
        settings = resolve(cli, os.environ, lambda name: config.getini(name))
    except ConfigError as exc:
        raise pytest.UsageError(str(exc)) from None
    hardware = None
    if settings.hw:
        try:
            from pytest_specbound.physics.hardware import resolve_hardware

            hardware = resolve_hardware(settings.hw, None, "--specbound-hw")
        except ConfigError as exc:
            raise pytest.UsageError(str(exc)) from None
    session = SpecboundSession(config, settings, hardware)
    config.stash[SESSION] = session
    config.pluginmanager.register(session, "specbound-session")
    config.pluginmanager.register(Collection(session), "specbound-collection")
    if config.pluginmanager.hasplugin("xdist"):
        config.pluginmanager.register(XdistSharing(), "specbound-xdist")


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """A marker (or ``--specbound-concurrency``) with several levels: one test per level."""
    if "specbound_concurrency" not in metafunc.fixturenames:
        return
    mark = metafunc.definition.get_closest_marker("specbound")
    session = metafunc.config.stash.get(SESSION, None)
    levels: Any = session.settings.concurrency if session else None
    if not levels and mark is not None:
        levels = mark.kwargs.get("concurrency")
    if isinstance(levels, (list, tuple)) and len(levels) > 1:
        metafunc.parametrize("specbound_concurrency", list(levels),
                             ids=[f"c{n}" for n in levels])
