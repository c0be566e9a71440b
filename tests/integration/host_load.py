"""The machine's own drift, measured beside a real-server test: the CPU that work other than the
test and its server used, sampled each half second (Linux ``/proc``).

A verdict test on a real server asserts what the tool concludes about the server; a load that
starts or stops on the box between two runs changes the server's rate as much as the changes
the test injects. :class:`HostLoad` tells such a window apart, so a test compares runs made
under the same load and, when the box never holds still, says so with the figures instead of
failing on the box's account.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TypeVar

import pytest

T = TypeVar("T")

INTERVAL_S = 0.5
STEADY = 0.15  # the most the others' share of the host may move within, or between, windows


def _busy_s() -> float:
    with open("/proc/stat", encoding="ascii") as f:
        fields = [int(x) for x in f.readline().split()[1:9]]
    user, nice, system, _idle, _iowait, irq, softirq, steal = fields
    return (user + nice + system + irq + softirq + steal) / os.sysconf("SC_CLK_TCK")


def _stat(pid: int | str) -> list[str] | None:
    """``/proc/PID/stat``'s fields after the command's name (state first), or None."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as f:
            stat = f.read()
    except OSError:
        return None
    return stat[stat.rfind(")") + 2:].split()


def _process_tree_s(pids: set[int]) -> float:
    """CPU seconds of these processes, their threads and their waited-for children."""
    total = 0.0
    for pid in pids:
        fields = _stat(pid)
        if fields:
            total += sum(int(x) for x in fields[11:15])  # utime stime cutime cstime
    return total / os.sysconf("SC_CLK_TCK")


def _ours(extra: set[int]) -> set[int]:
    """This process, its live children (a pytester subprocess, a launched server), and
    ``extra``: whatever we run is ours, everything else on the box is load."""
    parents: dict[int, tuple[int, int]] = {}  # pid -> (ppid, process group)
    for entry in os.listdir("/proc"):
        fields = _stat(entry) if entry.isdigit() else None
        if fields:
            parents[int(entry)] = (int(fields[1]), int(fields[2]))
    pids = {os.getpid(), *extra}
    grown = True
    while grown:  # children, grandchildren (a server a pytester run launched), their groups
        found = {pid for pid, (ppid, group) in parents.items() if ppid in pids or group in pids}
        grown = not found <= pids
        pids |= found
    return pids


@dataclass(frozen=True)
class Window:
    """The others' share of the host over one measured window: its mean, and its low and high
    half-second readings (10th and 90th percentiles)."""

    mean: float
    low: float
    high: float

    @property
    def steady(self) -> bool:
        return self.high - self.low <= STEADY

    @property
    def quiet(self) -> bool:
        """Steady with little else running: the noise is the server's own."""
        return self.steady and self.high <= STEADY

    def __str__(self) -> str:
        return f"other work {self.mean:.0%} of the host (half-seconds {self.low:.0%}-{self.high:.0%})"


class HostLoad:
    """``with HostLoad(server_pid) as load: ...`` then ``load.window``: the others' share of
    every core while the block ran. Linux only; elsewhere it reads as a quiet host."""

    def __init__(self, *pids: int) -> None:
        self.pids = set(pids)
        self.readings: list[float] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def _sample(self) -> None:
        cores = os.cpu_count() or 1
        ours = _ours(self.pids)
        busy, own, t = _busy_s(), _process_tree_s(ours), time.monotonic()
        while not self._stop.wait(INTERVAL_S):
            ours |= _ours(self.pids)
            busy2, own2, t2 = _busy_s(), _process_tree_s(ours), time.monotonic()
            others = max(0.0, (busy2 - busy) - (own2 - own))
            self.readings.append(min(1.0, others / max(1e-6, (t2 - t) * cores)))
            busy, own, t = busy2, own2, t2

    def __enter__(self) -> HostLoad:
        if os.path.isdir("/proc"):
            self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()

    @property
    def window(self) -> Window:
        """The mean, and the 10th and 90th percentiles: a daemon's blip of a half second is
        not a change of load."""
        r = sorted(self.readings or [0.0])
        tenth = (len(r) - 1) // 10
        return Window(sum(r) / len(r), r[tenth], r[len(r) - 1 - tenth])


def comparable(*windows: Window) -> bool:
    """Windows the same machine held still through: each steady, and all at the same load."""
    means = [w.mean for w in windows]
    return all(w.steady for w in windows) and max(means) - min(means) <= STEADY


DEADLINE_S = 100  # a test measures again only if it still ends within this (the suite's
# bound is 120 s a test: pyproject's pytest-timeout at 240 s is the backstop)


class Patience:
    """How long a test may spend measuring again because the box moved: one allowance for
    all its measurements, so a test of many blocks stays bounded too; and a deadline from the
    test's start that another try must still fit in (as long as the last one took)."""

    def __init__(self, seconds: float, deadline_s: float = DEADLINE_S) -> None:
        self.seconds = seconds
        self.used = 0.0  # seconds of measurements thrown away because the box moved
        self.deadline_s = deadline_s
        self.started = time.monotonic()

    @property
    def spent(self) -> bool:
        return self.used > self.seconds

    def fits(self, next_s: float) -> bool:
        """Whether one more try of ``next_s`` seconds ends before the deadline."""
        return time.monotonic() - self.started + next_s <= self.deadline_s


def until_still(attempt: Callable[[], tuple[T, Sequence[Window]]], patience: Patience,
                quiet: bool = False) -> T:
    """``attempt()`` (its result and the windows it measured) again until the box held still
    through all its windows (and, with ``quiet``, ran little else: a test of the rule's error
    rates holds for the server's own noise, not for the jitter of a contended box), while
    ``patience`` lasts (one attempt at least); skipped, with what the box did in each, if it
    never did."""
    seen = []
    while True:
        started = time.monotonic()
        value, windows = attempt()
        if comparable(*windows) and (not quiet or all(w.quiet for w in windows)):
            return value
        took = time.monotonic() - started
        patience.used += took
        seen.append(" then ".join(f"[{w}]" for w in windows))
        if patience.spent or not patience.fits(took):
            pytest.skip(f"the box's load moved{' or was high' * quiet} in each of {len(seen)} "
                        f"tries, and the test's {patience.seconds:g} s for measuring again "
                        f"(or its {patience.deadline_s:g} s in all) are spent: "
                        + "; ".join(seen))
