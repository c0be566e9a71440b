"""Where the suite's time goes (a pytest plugin for this project's own tests).

Each test's wall time (setup, call and teardown) is held against its own timeout (its
``timeout`` marker, else ``--timeout``, else the ini's), summed per test file, and printed at the
end of the run: the files' shares, and every test that used more than half of its timeout (a
test that near its bound fails on a slower machine for no fault of the code). With
``--suite-times=FILE`` the figures are also written as JSON, which ``bench/suite_time.py`` reads.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import pytest

HALF = 0.5  # a test over this share of its timeout is listed


@dataclass(frozen=True)
class TimedTest:
    """One test's wall time and the timeout it ran under (None: no timeout)."""

    nodeid: str
    seconds: float
    timeout: float | None

    @property
    def file(self) -> str:
        return self.nodeid.split("::", 1)[0]

    @property
    def share_of_timeout(self) -> float | None:
        return self.seconds / self.timeout if self.timeout else None


@dataclass(frozen=True)
class FileTime:
    """A test file's tests, their summed wall time, and its slowest test."""

    file: str
    tests: int
    seconds: float
    slowest: TimedTest


def by_file(times: Iterable[TimedTest]) -> list[FileTime]:
    """The tests summed per file, the costliest first."""
    groups: dict[str, list[TimedTest]] = {}
    for t in times:
        groups.setdefault(t.file, []).append(t)
    files = [FileTime(f, len(ts), sum(t.seconds for t in ts), max(ts, key=lambda t: t.seconds))
             for f, ts in groups.items()]
    return sorted(files, key=lambda f: -f.seconds)


def file_table(times: list[TimedTest], most: int = 15) -> list[str]:
    """Lines: each file's seconds and share of the whole, the costliest ``most`` of them."""
    files = by_file(times)
    total = sum(f.seconds for f in files) or 1.0
    lines = [f"{'file':58} {'tests':>5} {'s':>8} {'share':>6}  slowest test (s)"]
    for f in files[:most]:
        name = f.slowest.nodeid.split("::", 1)[-1]
        lines.append(f"{f.file:58} {f.tests:5d} {f.seconds:8.1f} {f.seconds / total:6.1%}  "
                     f"{name[:50]} ({f.slowest.seconds:.1f})")
    rest = files[most:]
    if rest:
        seconds = sum(f.seconds for f in rest)
        others = f"{len(rest)} other file{'s' * (len(rest) != 1)}"
        lines.append(f"{others:58} {sum(f.tests for f in rest):5d} "
                     f"{seconds:8.1f} {seconds / total:6.1%}")
    lines.append(f"{'all':58} {len(times):5d} {total:8.1f}")
    return lines


def near_timeout(times: Iterable[TimedTest], share: float = HALF) -> list[TimedTest]:
    """The tests that used more than ``share`` of their timeout, the nearest first."""
    near = [t for t in times if (t.share_of_timeout or 0.0) > share]
    return sorted(near, key=lambda t: -(t.share_of_timeout or 0.0))


def timeout_of(item: pytest.Item) -> float | None:
    """The timeout pytest-timeout applies to ``item`` (its marker, the option, the ini)."""
    marker = item.get_closest_marker("timeout")
    if marker is not None:
        value = marker.args[0] if marker.args else marker.kwargs.get("timeout")
        return float(value) if value else None
    option = item.config.getoption("timeout", None)
    if option is not None:
        return float(option) or None
    try:
        ini = item.config.getini("timeout")
    except ValueError:  # pytest-timeout not installed
        return None
    return float(ini) if ini else None


TIMEOUT_PROPERTY = "timeout_s"  # each report carries its test's timeout (across xdist workers)


class SuiteTime:
    """Collects each test's wall time and timeout; reports them when the session ends."""

    def __init__(self, path: str | None, report: bool) -> None:
        self.path = path
        self.report = report  # False in an xdist worker: the controller reports
        self.seconds: dict[str, float] = {}
        self.timeouts: dict[str, float | None] = {}

    def times(self) -> list[TimedTest]:
        return [TimedTest(n, s, self.timeouts.get(n)) for n, s in self.seconds.items()]

    @pytest.hookimpl(trylast=True)
    def pytest_collection_modifyitems(self, items: list[pytest.Item]) -> None:
        for item in items:
            item.user_properties.append((TIMEOUT_PROPERTY, timeout_of(item)))

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        self.seconds[report.nodeid] = self.seconds.get(report.nodeid, 0.0) + report.duration
        for name, value in report.user_properties:
            if name == TIMEOUT_PROPERTY:
                self.timeouts[report.nodeid] = value

    def pytest_terminal_summary(self, terminalreporter: pytest.TerminalReporter) -> None:
        times = self.times()
        if not times or not self.report:
            return
        tr = terminalreporter
        tr.write_sep("=", "time by test file")
        for line in file_table(times):
            tr.write_line(line)
        near = near_timeout(times)
        if near:
            tr.write_sep("-", f"tests over {HALF:.0%} of their timeout (a slower machine fails "
                              "them: measure less, or derive the bound from this machine's speed)")
            for t in near:
                tr.write_line(f"{t.seconds:7.1f} s of {t.timeout:g} s ({t.share_of_timeout:.0%})  "
                              f"{t.nodeid}")
        else:
            worst = max(times, key=lambda t: t.share_of_timeout or 0.0)
            if worst.timeout:
                tr.write_line(f"no test over {HALF:.0%} of its timeout (nearest: "
                              f"{worst.nodeid}, {worst.seconds:.1f} s of {worst.timeout:g} s)")
        if self.path:
            write_times(self.path, times)


def write_times(path: str, times: list[TimedTest]) -> None:
    """The times as JSON, written whole (the project's atomic write)."""
    from pytest_specbound.atomic import write_json

    rows = [{"nodeid": t.nodeid, "seconds": round(t.seconds, 3), "timeout": t.timeout}
            for t in times]
    write_json(Path(path), {"tests": rows})


def read_times(path: str) -> list[TimedTest]:
    """The times ``write_times`` wrote."""
    with open(path, encoding="utf-8") as f:
        rows = json.load(f)["tests"]
    return [TimedTest(r["nodeid"], float(r["seconds"]), r["timeout"]) for r in rows]


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--suite-times", metavar="FILE", default=None,
                     help="write each test's wall time and timeout to FILE as JSON")


def pytest_configure(config: pytest.Config) -> None:
    worker = hasattr(config, "workerinput")  # an xdist worker: the controller reports
    config.pluginmanager.register(SuiteTime(config.getoption("suite_times"), not worker),
                                  "suite-time")
