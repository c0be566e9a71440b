"""TOML loading with one-line errors that name the file and line."""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Any

from .errors import ConfigError

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on 3.10 only
    import tomli as tomllib  # type: ignore[import-not-found,unused-ignore]


def load_toml(path: str | Path) -> dict[str, Any]:
    """Parse a TOML file; syntax errors become ``ConfigError`` naming file and line."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"{p}: cannot read: {exc.strerror or exc}") from None
    return loads_toml(text, str(p))


def loads_toml(text: str, origin: str) -> dict[str, Any]:
    """Parse TOML text, naming ``origin`` in errors."""
    try:
        data: dict[str, Any] = tomllib.loads(text)
        return data
    except tomllib.TOMLDecodeError as exc:
        line = getattr(exc, "lineno", None)
        msg = getattr(exc, "msg", str(exc))
        found = re.search(r"\s*\(at line (\d+), column (\d+)\)", msg)
        if found:  # Python 3.11-3.13 put the position in the message only
            line = line or int(found.group(1))
            msg = msg[: found.start()] + f" (column {found.group(2)})"
        where = f"{origin}:{line}" if line else origin
        raise ConfigError(f"{where}: TOML syntax error: {msg}") from None


def key_line(text: str, key: str, table: str | None = None) -> int | None:
    """Best-effort line number of ``key`` (inside ``[table]`` if given) in TOML text."""
    current: str | None = None
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if line.startswith("[") and not line.startswith("[["):
            current = line.strip("[]").strip().replace('"', "")
            if table is not None and key == "" and current == table:
                return number
            if table is None and key and (current == key or current.startswith(key + ".")):
                return number
            continue
        if (table is None or current == table) and line.split("=", 1)[0].strip().strip('"') == key:
            return number
    return None
