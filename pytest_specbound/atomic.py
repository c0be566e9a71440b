"""Atomic file writes: a temp file in the same folder, fsync, then rename over the target."""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any


@contextlib.contextmanager
def replacing(path: Path) -> Iterator[Path]:
    """A fresh temp path beside ``path`` (unique per writer, so parallel writers never share
    one) for the caller to write; renamed over ``path`` when the block ends without error."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, name = tempfile.mkstemp(prefix=f".{path.stem}.", suffix=f".tmp{path.suffix}",
                                dir=path.parent)
    os.close(fd)
    tmp = Path(name)
    try:
        yield tmp
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise


def write_text(path: Path, text: str) -> None:
    with replacing(path) as tmp, open(tmp, "w", encoding="utf-8") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())


def write_json(path: Path, data: Any) -> None:
    write_text(path, json.dumps(data, indent=2, default=str) + "\n")
