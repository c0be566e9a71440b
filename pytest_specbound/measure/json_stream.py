"""A prompt file's entries one at a time: the items of one JSON array, or the lines of a JSONL
file, read in chunks so that a file of hundreds of megabytes (ShareGPT's is 640 MB) is never
held whole, neither as text nor as parsed objects. An entry is parsed, handed on and dropped."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any, TextIO

from pytest_specbound._toml import BOMS as _BOMS
from pytest_specbound.errors import ConfigError

CHUNK_CHARS = 1 << 22  # 4 Mi characters read at a time
TAIL_CHARS = 16  # a literal or escape cut at the chunk's end fails this close to it
_DECODER = json.JSONDecoder()
_SPACE = " \t\r\n"


def read_entries(path: Path, origin: str) -> Iterator[tuple[str, Any]]:
    """(where, object) per entry: ``origin[i]`` for an array's items, ``origin:LINE`` for JSONL.
    Invalid JSON is a :class:`ConfigError` naming the entry, line and column."""
    try:
        with path.open("rb") as raw:
            head = raw.read(4)
        codec = next((name for bom, name in _BOMS if head.startswith(bom)), "utf-8")
        handle = path.open(encoding=codec)
    except OSError as exc:
        raise ConfigError(f"{origin}: cannot read: {exc.strerror or exc}") from None
    with handle:
        try:
            first = _first_char(handle)
            handle.seek(0)
            if first == "[":
                yield from _array_items(handle, origin)
            else:
                yield from _lines(handle, origin)
        except UnicodeDecodeError as exc:
            raise ConfigError(f"{origin}: not {codec.upper().replace('-SIG', '')} text "
                              f"({exc.reason}): save it as UTF-8") from None


def _first_char(handle: TextIO) -> str:
    while True:
        block = handle.read(4096)
        if not block:
            return ""
        stripped = block.lstrip(_SPACE + "\ufeff")
        if stripped:
            return stripped[0]


def _lines(handle: TextIO, origin: str) -> Iterator[tuple[str, Any]]:
    for number, line in enumerate(handle, start=1):
        if not line.strip():
            continue
        try:
            yield f"{origin}:{number}", json.loads(line)
        except ValueError as exc:
            raise ConfigError(f"{origin}:{number}: invalid JSON: {exc}") from None


class _Buffer:
    """The unread text of a file, refilled in chunks; tracks the line of its start."""

    def __init__(self, handle: TextIO) -> None:
        self.handle = handle
        self.text = ""
        self.pos = 0
        self.eof = False
        self.line = 1  # the file's line at text[0]

    def more(self) -> bool:
        if self.eof:
            return False
        chunk = self.handle.read(CHUNK_CHARS)
        if not chunk:
            self.eof = True
            return False
        self.line += self.text.count("\n", 0, self.pos)
        self.text, self.pos = self.text[self.pos:] + chunk, 0
        return True

    def skip_space(self) -> str:
        """The next non-space character ('' at the end of the file), not consumed."""
        while True:
            while self.pos < len(self.text) and self.text[self.pos] in _SPACE:
                self.pos += 1
            if self.pos < len(self.text):
                return self.text[self.pos]
            if not self.more():
                return ""

    def where(self, pos: int) -> str:
        line = self.line + self.text.count("\n", 0, pos)
        column = pos - self.text.rfind("\n", 0, pos)
        return f"line {line} column {column}"


def _array_items(handle: TextIO, origin: str) -> Iterator[tuple[str, Any]]:
    buf = _Buffer(handle)
    buf.skip_space()
    buf.pos += 1  # the "["
    index = 0
    if buf.skip_space() == "]":
        return
    while True:
        if buf.skip_space() == "":
            raise ConfigError(f"{origin}[{index}]: invalid JSON: the file ends inside the array")
        while True:
            try:
                obj, end = _DECODER.raw_decode(buf.text, buf.pos)
                break
            except json.JSONDecodeError as exc:
                # an entry cut by the chunk's end fails near that end (or in a string that
                # runs to it); an error well inside the text is the file's own
                cut = exc.pos >= len(buf.text) - TAIL_CHARS or exc.msg.startswith("Unterminated")
                if not cut or not buf.more():
                    ends = " (the file ends inside this entry: cut off?)" if cut else ""
                    raise ConfigError(f"{origin}[{index}]: invalid JSON at "
                                      f"{buf.where(exc.pos)}: {exc.msg}{ends}") from None
        if end >= len(buf.text) and buf.more():  # a number may go on in the next chunk
            continue
        yield f"{origin}[{index}]", obj
        index += 1
        buf.pos = end
        after = buf.skip_space()
        if after == "]":
            return
        if after != ",":
            raise ConfigError(f"{origin}[{index}]: invalid JSON at {buf.where(buf.pos)}: "
                              "expected ',' or ']' after an entry")
        buf.pos += 1
