"""The suite's own time report (tests/suite_time.py, bench/suite_time.py): each file's share, and
the tests that used more than half of their timeout, from a run that knows both."""

from __future__ import annotations

import json

from bench.suite_time import from_junit
from tests.conftest import PYTESTER_INI
from tests.suite_time import TimedTest, by_file, file_table, near_timeout, read_times

INNER = """
import time

import pytest


@pytest.mark.timeout(1)
def test_near_its_bound():
    time.sleep(0.6)


def test_quick():
    pass
"""


def test_a_test_over_half_its_timeout_is_named_and_the_files_are_shared_out(pytester):
    pytester.makeini(PYTESTER_INI.replace("addopts =", "timeout = 300\naddopts ="))
    pytester.makepyfile(test_slow=INNER, test_other="def test_one():\n    pass\n")
    result = pytester.runpytest("-p", "tests.suite_time", "--suite-times=t.json",
                                "--junitxml=j.xml")
    result.assert_outcomes(passed=3)
    out = result.stdout.str()
    assert "time by test file" in out and "test_slow.py" in out, out
    # the sleeping test used some 60% of its 1 s; the others nothing of their 300 s
    (line,) = [x for x in out.splitlines() if "of 1 s (" in x]
    assert line.endswith("test_slow.py::test_near_its_bound"), line
    times = {t.nodeid: t for t in read_times(str(pytester.path / "t.json"))}
    assert set(times) == {"test_slow.py::test_near_its_bound", "test_slow.py::test_quick",
                          "test_other.py::test_one"}
    assert times["test_slow.py::test_near_its_bound"].timeout == 1.0
    assert times["test_other.py::test_one"].timeout == 300.0
    assert 0.6 <= times["test_slow.py::test_near_its_bound"].seconds < 1.0
    # the JUnit file carries each test's timeout too
    junit = {t.nodeid.rsplit("::", 1)[-1]: t for t in from_junit(str(pytester.path / "j.xml"))}
    assert junit["test_near_its_bound"].timeout == 1.0 and junit["test_one"].timeout == 300.0
    assert json.loads((pytester.path / "t.json").read_text())["tests"]


def test_files_are_ranked_by_their_time_and_the_rest_summed():
    times = [TimedTest("a.py::x", 3.0, 10.0), TimedTest("a.py::y", 1.0, 10.0),
             TimedTest("b.py::z", 6.0, 10.0), TimedTest("c.py::w", 0.5, None)]
    files = by_file(times)
    assert [f.file for f in files] == ["b.py", "a.py", "c.py"]
    assert files[1].tests == 2 and files[1].seconds == 4.0 and files[1].slowest.nodeid == "a.py::x"
    lines = file_table(times, most=2)
    assert lines[1].startswith("b.py") and "57.1%" in lines[1]  # 6 of 10.5 s
    assert lines[3].startswith("1 other file ") and lines[-1].split()[-1] == "10.5"
    assert [t.nodeid for t in near_timeout(times)] == ["b.py::z"]  # 60% of its 10 s; none at 50%
