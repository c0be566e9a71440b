"""Live progress of a measurement: a line that updates on a terminal, periodic lines otherwise."""

from __future__ import annotations

import time
from typing import Any

from pytest_specbound.measure.stats import ratio_interval


class Progress:
    """Feeds on each new record; silent under ``-q`` (the plugin does not create one then)."""

    def __init__(self, write: Any, nodeid: str, tty: bool, every_s: float = 10.0) -> None:
        self.write = write  # write(text, rewrite): the plugin's writer, capture suspended
        self.nodeid = nodeid
        self.every_s = every_s
        self.tty = tty
        self._last: float | None = None  # no line printed yet: the first one goes out at once

    def line(self, m: Any) -> str:
        ok = [r for r in m.ok if r.decode_s > 0]
        rate = ratio_interval([float(r.decode_tokens) for r in ok], [r.decode_s for r in ok], 0.95)
        n = len(m.records)
        parts = [f"specbound {self.nodeid}: {n} request{'s' * (n != 1)}"]
        if rate:
            half = (rate.high - rate.low) / 2
            parts.append(f"{rate.estimate:.1f} ± {half:.1f} tok/s" if half == half and
                         half != float("inf") else f"{rate.estimate:.1f} tok/s")
        if m.accept_length:
            parts.append(f"accept {m.accept_length:.2f} ({m.accept_source})")
        if m.failures:
            parts.append(f"{len(m.failures)} failed")
        return ", ".join(parts)

    def waiting(self, text: str) -> None:
        """A line while the test waits (for the measurement lock, for a server to be ready)."""
        self.write(f"specbound {self.nodeid}: {text}", self.tty)

    def update(self, m: Any) -> None:
        now = time.monotonic()
        if self.tty:
            self.write(self.line(m), True)
        elif self._last is None or now - self._last >= self.every_s:
            self._last = now
            self.write(self.line(m), False)
