"""Ctrl-C that lands in a finalizer is not lost (a CI fault test once waited 60 s on a server
that was loading, its SIGINT printed as "Exception ignored" and dropped)."""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from pytest_specbound import interrupts
from pytest_specbound.serving.server import LaunchSpec, Readiness, start_server


@pytest.fixture
def installed() -> Iterator[None]:
    """Python's own SIGINT handler (a CI step may start the run with SIGINT ignored), then
    the plugin's, as a session installs them."""
    old = signal.signal(signal.SIGINT, signal.default_int_handler)
    restore = interrupts.install()
    yield
    restore()
    signal.signal(signal.SIGINT, old)


class _RaisesSigintWhenCollected:
    def __del__(self) -> None:
        signal.raise_signal(signal.SIGINT)  # its handler runs here, inside the finalizer


@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
def test_a_sigint_raised_inside_a_finalizer_is_dropped_by_python_but_not_by_check(installed):
    _RaisesSigintWhenCollected()  # collected at once: Python prints the interrupt and drops it
    with pytest.raises(KeyboardInterrupt):
        interrupts.check()


def test_without_a_signal_check_passes_and_restore_clears_what_was_noted():
    interrupts.clear()
    interrupts.check()
    restore = interrupts.install()
    interrupts.note("SIGTERM")
    with pytest.raises(KeyboardInterrupt, match="SIGTERM"):
        interrupts.check()
    restore()
    interrupts.check()  # the next session starts clean


def test_sigterm_becomes_an_interrupt_and_is_noted(installed):
    with pytest.raises(KeyboardInterrupt, match="SIGTERM"):
        signal.raise_signal(signal.SIGTERM)
    with pytest.raises(KeyboardInterrupt, match="SIGTERM"):
        interrupts.check()


def test_a_server_being_waited_for_stops_waiting_on_a_noted_interrupt(installed, tmp_path: Path):
    """The readiness loop checks every turn: an interrupt whose raise was lost ends the wait
    within a turn, and the launched server is stopped (nothing left running)."""
    import sys

    cmd = [sys.executable, "-c", "import time; time.sleep(60)"]  # never answers /health
    timer = threading.Timer(0.5, interrupts.note)
    timer.start()
    began = time.monotonic()
    try:
        with pytest.raises(KeyboardInterrupt):
            start_server(LaunchSpec(cmd), Readiness(("/health",), 30), tmp_path)
    finally:
        timer.cancel()
    assert time.monotonic() - began < 20  # not the 30 s readiness timeout


def test_a_run_inside_a_run_leaves_the_outer_runs_interrupt_noted():
    """pytester runs a session in-process: its install and restore must not forget an interrupt
    the enclosing run noted, nor hand its own to the enclosing run."""
    outer = interrupts.install()
    try:
        interrupts.note("SIGTERM")
        inner = interrupts.install()
        interrupts.check()  # the inner run starts clean
        interrupts.note()
        inner()
        with pytest.raises(KeyboardInterrupt, match="SIGTERM"):
            interrupts.check()  # the outer run's, as it was
    finally:
        outer()
    interrupts.check()
