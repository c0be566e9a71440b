"""User files as text (any byte-order mark an editor writes) and TOML loading, with one-line
errors that name the file and line."""

from __future__ import annotations

import codecs
import re
import sys
from pathlib import Path
from typing import Any

from pytest_specbound.errors import ConfigError

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on 3.10 only
    import tomli as tomllib  # type: ignore[import-not-found,unused-ignore]

# a table as tomllib returns it (or a JSON object read the same way): raw input, validated
# by whoever reads it into typed values
TomlTable = dict[str, Any]


# longest first: a UTF-32 LE mark begins with the UTF-16 LE one
BOMS = ((codecs.BOM_UTF32_LE, "utf-32"), (codecs.BOM_UTF32_BE, "utf-32"),
         (codecs.BOM_UTF8, "utf-8-sig"), (codecs.BOM_UTF16_LE, "utf-16"),
         (codecs.BOM_UTF16_BE, "utf-16"))


def decode_text(raw: bytes, origin: str) -> str:
    """A file a person edited, as text: UTF-8 with or without the byte-order mark some editors
    write, or UTF-16/32 with one; anything else is a one-line error naming ``origin``."""
    codec = next((name for bom, name in BOMS if raw.startswith(bom)), "utf-8")
    try:
        return raw.decode(codec)
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{origin}: not {codec.upper().replace('-SIG', '')} text (byte "
                          f"{exc.start}: {raw[exc.start:exc.start + 1]!r}): save it as UTF-8"
                          ) from None


def read_text(path: str | Path, origin: str | None = None) -> str:
    """Read a user's file with :func:`decode_text`; a file that cannot be read is a ConfigError."""
    p = Path(path)
    try:
        raw = p.read_bytes()
    except OSError as exc:
        raise ConfigError(f"{origin or p}: cannot read: {exc.strerror or exc}") from None
    return decode_text(raw, str(p))


def load_toml(path: str | Path) -> TomlTable:
    """Parse a TOML file; syntax errors become ``ConfigError`` naming file and line."""
    return loads_toml(read_text(path), str(path))


def loads_toml(text: str, origin: str) -> TomlTable:
    """Parse TOML text, naming ``origin`` in errors."""
    try:
        data: TomlTable = tomllib.loads(text)
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


def _strip_comment(line: str) -> str:
    """The line without a trailing ``# comment`` (a ``#`` inside a string is kept)."""
    quote = ""
    for i, ch in enumerate(line):
        if quote:
            if ch == quote:
                quote = ""
        elif ch in "\"'":
            quote = ch
        elif ch == "#":
            return line[:i]
    return line


def _dotted(text: str) -> list[str]:
    """``a . "b.c" . d`` -> ``["a", "b.c", "d"]``."""
    parts, current, quote = [], "", ""
    for ch in text:
        if quote:
            if ch == quote:
                quote = ""
            else:
                current += ch
        elif ch in "\"'":
            quote = ch
        elif ch == ".":
            parts.append(current.strip())
            current = ""
        else:
            current += ch
    parts.append(current.strip())
    return parts


def key_line(text: str, key: str, table: str | None = None) -> int | None:
    """Line number of ``table.key`` in TOML text (or of ``table`` itself when ``key`` is empty).

    Knows table headers followed by comments, quoted header parts and dotted keys
    (``classes.coding.accept = ...`` at the top or ``coding.accept = ...`` under ``[classes]``).
    """
    want = _dotted(table) if table else []
    if key:
        want = [*want, key]
    current: list[str] = []
    first_inside: int | None = None
    for number, raw in enumerate(text.splitlines(), start=1):
        line = _strip_comment(raw).strip()
        if not line:
            continue
        if line.startswith("[") and not line.startswith("[["):
            current = _dotted(line.strip("[]"))
            path = current
        elif "=" in line:
            path = current + _dotted(line.split("=", 1)[0])
        else:
            continue
        if path == want:
            return number
        if first_inside is None and path[:len(want)] == want:
            first_inside = number  # a table given only through its keys
    return first_inside
