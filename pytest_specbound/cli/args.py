"""Argument types shared by the subcommands: the value rules of :mod:`pytest_specbound.values`
as argparse types, the output formats, and ``--hw`` resolved."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any, TypeVar

from pytest_specbound.values import ValueProblem, levels, levels_text, number, whole_number

FORMATS = ("table", "json", "markdown")
T = TypeVar("T")


def arg_type(rule: Callable[[str], T]) -> Callable[[str], T]:
    """An argparse type from a value rule of :mod:`pytest_specbound.values`."""
    def parse(text: str) -> T:
        try:
            return rule(text)
        except ValueProblem as exc:
            raise argparse.ArgumentTypeError(f"{exc}, got {text!r}") from None
    return parse


positive_float = arg_type(lambda text: number(text, 0.0, open_low=True))
positive_int = arg_type(lambda text: whole_number(text, 1))
nonneg_int = arg_type(lambda text: whole_number(text, 0))
level = arg_type(lambda text: levels([whole_number(text, 1)])[0])


def batch_list(text: str) -> tuple[int, ...]:
    """``4`` or ``1,2,4,8`` (a batch under 1 is left to the roofline's own one-line error)."""
    if "," not in text:
        return (nonneg_int(text),)
    try:
        return levels_text(text)
    except ValueProblem as exc:
        raise argparse.ArgumentTypeError(f"{exc}: a batch or a list, e.g. 1,2,4,8") from None


def hardware_from_args(spec: str, catalog_file: str | None, origin: str = "--hw") -> Any:
    from pytest_specbound.physics.hardware import resolve_hardware

    return resolve_hardware(spec, catalog_file, origin)
