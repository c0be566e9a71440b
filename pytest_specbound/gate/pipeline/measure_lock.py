"""One measurement per server at a time, machine-wide.

Every figure rests on one request at a time: decode tok/s, Prometheus counter deltas around a
request, TRT-LLM's drained stats queue. Two pytest-xdist workers, or two pytest processes on one CI
machine, measuring the same server at once would each see the other's load. A file lock per server
identity, held from the class's warm-up to its last request, serialises them; a process that waits
says whom it waits for.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

LOCK_DIR_ENV = "SPECBOUND_LOCK_DIR"
SAY_EVERY_S = 15.0
POLL_S = 0.05


def lock_dir() -> Path:
    """``$SPECBOUND_LOCK_DIR``, else a folder in the system temp dir shared by every process."""
    return Path(os.environ.get(LOCK_DIR_ENV) or Path(tempfile.gettempdir()) / "specbound-locks")


def _paths(identity: str, folder: Path) -> tuple[Path, Path]:
    digest = hashlib.sha256(identity.encode()).hexdigest()[:16]
    return folder / f"measure-{digest}.lock", folder / f"measure-{digest}.holder"


def _holder_text(path: Path) -> str:
    try:
        info = json.loads(path.read_text(encoding="utf-8"))
        since = time.time() - float(info["since"])
        return f"{info['what']} (pid {info['pid']}, for {since:.0f} s)"
    except (OSError, ValueError, KeyError, TypeError):
        return "another measurement"


@contextmanager
def exclusive_measurement(identity: str, what: str, say: Callable[[str], None] | None = None,
                          folder: Path | None = None) -> Iterator[float]:
    """Hold the measurement lock of ``identity`` (a server URL or launch config) for the block.

    ``what`` names this holder (shown to waiters); ``say`` gets a line when the lock is busy and
    then every 15 s while waiting. Yields the seconds spent waiting.
    """
    from filelock import FileLock, Timeout

    base = folder or lock_dir()
    base.mkdir(parents=True, exist_ok=True)
    lock_path, holder_path = _paths(identity, base)
    lock = FileLock(str(lock_path))
    start = time.monotonic()
    next_say = start
    while True:
        try:
            lock.acquire(timeout=POLL_S)
            break
        except Timeout:
            now = time.monotonic()
            if say is not None and now >= next_say:
                say(f"waiting for the server {identity}: measured by {_holder_text(holder_path)}; "
                    f"waited {now - start:.0f} s")
                next_say = now + SAY_EVERY_S
    try:
        holder_path.write_text(json.dumps({"what": what, "pid": os.getpid(), "since": time.time()}),
                               encoding="utf-8")
        yield time.monotonic() - start
    finally:
        lock.release()
