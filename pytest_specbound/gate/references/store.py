"""References measured once per run, across pytest-xdist workers too: the first worker that
needs one measures it under the reference's lock in the run's shared folder and leaves its
result there; the others read it (without xdist the store holds nothing and each reference is
measured here)."""

from __future__ import annotations

import contextlib
import hashlib
import json
from collections.abc import Iterator
from pathlib import Path

from pytest_specbound.atomic import write_json
from pytest_specbound.errors import ServerError, SpecboundError
from pytest_specbound.gate.verdicts.result import ClassResult

Key = tuple[str, str, int]  # budget path, class, level


class ReferenceStore:
    """One reference's measured results (or why there is none), by budget, class and level."""

    def __init__(self, folder: Path | None, name: str = "twin") -> None:
        self.folder = folder
        self.name = name

    @contextlib.contextmanager
    def held(self) -> Iterator[None]:
        """One worker at a time measures or reads this reference."""
        if self.folder is None:
            yield
            return
        from filelock import FileLock

        with FileLock(str(self.folder / f"specbound-{self.name}s.lock")):
            yield

    def _path(self, key: Key) -> Path | None:
        if self.folder is None:
            return None
        digest = hashlib.sha256(json.dumps(list(key)).encode()).hexdigest()[:16]
        return self.folder / f"specbound-{self.name}-{digest}.json"

    def load(self, key: Key) -> ClassResult | SpecboundError | None:
        """A result another worker measured (or its error); None where none is stored."""
        path = self._path(key)
        if path is None or not path.is_file():
            return None
        stored = json.loads(path.read_text(encoding="utf-8"))
        if "error" in stored:
            return ServerError(stored["error"])
        return ClassResult.from_json(stored["result"])

    def save(self, key: Key, found: ClassResult | SpecboundError) -> None:
        path = self._path(key)
        if path is None:
            return
        write_json(path, {"error": str(found)} if isinstance(found, SpecboundError)
                   else {"result": found.to_json()})
