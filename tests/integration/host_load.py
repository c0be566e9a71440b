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
from dataclasses import dataclass

INTERVAL_S = 0.5
STEADY = 0.15  # the most the others' share of the host may move within, or between, windows


def _busy_s() -> float:
    with open("/proc/stat", encoding="ascii") as f:
        fields = [int(x) for x in f.readline().split()[1:9]]
    user, nice, system, _idle, _iowait, irq, softirq, steal = fields
    return (user + nice + system + irq + softirq + steal) / os.sysconf("SC_CLK_TCK")


def _process_tree_s(pids: set[int]) -> float:
    """CPU seconds of these processes, their threads and their waited-for children."""
    total = 0.0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat", encoding="ascii") as f:
                stat = f.read()
        except OSError:
            continue
        fields = stat[stat.rfind(")") + 2:].split()
        total += sum(int(x) for x in fields[11:15])  # utime stime cutime cstime
    return total / os.sysconf("SC_CLK_TCK")


def _ours(extra: set[int]) -> set[int]:
    """This process, its live children (a pytester subprocess, a launched server), and
    ``extra``: whatever we run is ours, everything else on the box is load."""
    me = os.getpid()
    pids = {me, *extra}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", encoding="ascii") as f:
                stat = f.read()
        except OSError:
            continue
        fields = stat[stat.rfind(")") + 2:].split()
        if int(fields[1]) in pids or int(fields[2]) in pids:  # ppid, or our process group
            pids.add(int(entry))
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


def comparable(a: Window, b: Window) -> bool:
    """Two windows the same machine held still through: each steady, and the same load."""
    return a.steady and b.steady and abs(a.mean - b.mean) <= STEADY
