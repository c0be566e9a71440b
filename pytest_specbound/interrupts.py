"""Ctrl-C and SIGTERM that cannot be lost.

Python raises ``KeyboardInterrupt`` wherever the main thread happens to be when the signal
lands. Where that is a finalizer (an HTTP response or socket closed by the garbage collector,
which a loop polling a loading server makes ten times a second), the exception is printed as
"Exception ignored in ..." and dropped: the run went on waiting for its server, Ctrl-C
forgotten (a CI fault test caught it). The handlers installed here also note the interrupt, and
each loop that waits on a server calls :func:`check` once a turn, which raises it again.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable
from types import FrameType
from typing import Any

_requested = threading.Event()
_why: list[str] = []


def check() -> None:
    """Raise ``KeyboardInterrupt`` if an interrupt was signalled (whether or not Python's own
    raise of it survived)."""
    if _requested.is_set():
        raise KeyboardInterrupt(*_why[:1])


def note(why: str = "") -> None:
    """Record an interrupt (what the signal handlers do before they raise)."""
    if not _requested.is_set():
        _why[:] = [why] if why else []
        _requested.set()


def _on_sigterm(signum: int, frame: FrameType | None) -> None:
    note("SIGTERM")
    raise KeyboardInterrupt("SIGTERM")


def _chained_sigint(previous: Callable[[int, FrameType | None], Any]
                    ) -> Callable[[int, FrameType | None], Any]:
    def on_sigint(signum: int, frame: FrameType | None) -> Any:
        note()
        return previous(signum, frame)  # Python's own raises KeyboardInterrupt

    return on_sigint


def install() -> Callable[[], None]:
    """From the main thread: SIGTERM becomes an interrupt (CI cancel, a timeout: servers
    stopped, results kept) and SIGINT is noted before its handler runs (a SIGINT that is
    ignored, as in a shell's background job, stays ignored). Returns what restores both, and
    what was noted before (an enclosing run's interrupt is not forgotten)."""
    if threading.current_thread() is not threading.main_thread():
        return lambda: None
    before = _requested.is_set(), list(_why)  # an enclosing run's (pytester in-process)
    clear()
    old_term = signal.signal(signal.SIGTERM, _on_sigterm)
    old_int = signal.getsignal(signal.SIGINT)
    if callable(old_int):
        signal.signal(signal.SIGINT, _chained_sigint(old_int))

    def restore() -> None:
        signal.signal(signal.SIGTERM, signal.SIG_DFL if old_term is None else old_term)
        if callable(old_int):
            signal.signal(signal.SIGINT, old_int)
        clear()  # as it was: this run's interrupt has ended this run, not an enclosing one
        if before[0]:
            note(*before[1][:1])

    return restore


def clear() -> None:
    _requested.clear()
    _why.clear()
