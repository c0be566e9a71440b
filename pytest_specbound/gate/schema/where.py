"""Errors that point at the file, line and key of a budget (or a marker's keyword), and the
typed readers of TOML values that raise them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pytest_specbound._toml import TomlTable, key_line
from pytest_specbound.errors import ConfigError


class Where:
    """Builds one-line errors that point at the file, line and key."""

    def __init__(self, path: Path, text: str, display: str | None = None) -> None:
        self.path, self.text = path, text
        self.display = display or str(path)

    def name(self, table: str | None, key: str) -> str:
        """Where ``table.key`` was written, as a user would look for it."""
        line = key_line(self.text, key, table)
        where = f"{self.display}:{line}" if line else self.display
        dotted = f"{table}.{key}" if table and key else (table or key)
        return f"{where}: {dotted}"

    def error(self, table: str | None, key: str, message: str) -> ConfigError:
        return ConfigError(f"{self.name(table, key)}: {message}")

    def check_keys(self, table: str, data: TomlTable, valid: set[str],
                   also: str = "") -> None:
        for key in data:
            if key not in valid:
                raise self.error(table, key, f"unknown key; valid: {', '.join(sorted(valid))}"
                                 f"{also}")

    def table(self, data: TomlTable, name: str, required: bool = True) -> TomlTable:
        value = data.get(name)
        if value is None:
            if required:
                raise self.error(None, "", f"missing table [{name}]")
            return {}
        if not isinstance(value, dict):
            raise self.error(None, name, "must be a table")
        return value

    def number(self, table: str, data: TomlTable, key: str, *, integer: bool = False,
               low: float | None = None, high: float | None = None) -> Any:
        if key not in data:
            return None
        value = data[key]
        kinds = (int,) if integer else (int, float)
        if isinstance(value, bool) or not isinstance(value, kinds):
            kind = "an integer" if integer else "a number"
            raise self.error(table, key, f"must be {kind}, got {value!r}")
        if (low is not None and value < low) or (high is not None and value > high):
            bounds = f"[{low if low is not None else '-inf'}, {high if high is not None else 'inf'}]"
            raise self.error(table, key, f"{value} is outside {bounds}")
        return value

    def string(self, table: str, data: TomlTable, key: str) -> str | None:
        if key not in data:
            return None
        if not isinstance(data[key], str) or not data[key]:
            raise self.error(table, key, f"must be a non-empty string, got {data[key]!r}")
        return str(data[key])
