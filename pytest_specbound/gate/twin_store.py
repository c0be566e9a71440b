"""Bases measured once per run, across pytest-xdist workers too: the first worker that needs
the bases measures them under one lock in the run's shared folder and leaves each there; the
others read them (without xdist the store holds nothing and each base is measured here)."""

from __future__ import annotations

import contextlib
import hashlib
import json
from collections.abc import Iterator
from pathlib import Path

from pytest_specbound.atomic import write_json
from pytest_specbound.errors import ServerError, SpecboundError
from pytest_specbound.measure.speedup import Baseline

TwinKey = tuple[str, str, int]  # budget path, class, level


class TwinStore:
    """The run's measured bases (or why there is none), by budget, class and level."""

    def __init__(self, folder: Path | None) -> None:
        self.folder = folder

    @contextlib.contextmanager
    def held(self) -> Iterator[None]:
        """One worker at a time measures or reads the bases."""
        if self.folder is None:
            yield
            return
        from filelock import FileLock

        with FileLock(str(self.folder / "specbound-twins.lock")):
            yield

    def _path(self, key: TwinKey) -> Path | None:
        if self.folder is None:
            return None
        digest = hashlib.sha256(json.dumps(list(key)).encode()).hexdigest()[:16]
        return self.folder / f"specbound-twin-{digest}.json"

    def load(self, key: TwinKey) -> Baseline | SpecboundError | None:
        """A base another worker measured (or its error); None where none is stored."""
        path = self._path(key)
        if path is None or not path.is_file():
            return None
        stored = json.loads(path.read_text(encoding="utf-8"))
        if "error" in stored:
            return ServerError(stored["error"])
        return Baseline(tuple(stored["rates"]), tuple(stored["rounds_ms"]),
                        stored["floor_round_ms"], stored["roofline_tok_s"], stored["command"])

    def save(self, key: TwinKey, found: Baseline | SpecboundError) -> None:
        path = self._path(key)
        if path is None:
            return
        if isinstance(found, SpecboundError):
            write_json(path, {"error": str(found)})
        else:
            write_json(path, {"rates": list(found.rates), "rounds_ms": list(found.rounds_ms),
                              "floor_round_ms": found.floor_round_ms,
                              "roofline_tok_s": found.roofline_tok_s, "command": found.command})
