"""Where the test suite's time goes: each test file's share of the whole, its slowest test, and
every test over half of its own timeout (one that a slower machine would fail for no fault of the
code). Reads the JSON the suite writes with ``--suite-times`` (each test's timeout included), or
a JUnit XML file (``--junitxml``: its ``timeout_s`` properties, where this suite wrote them), or
runs the suite itself.

    python bench/suite_time.py times.json           # from python -m pytest tests --suite-times=times.json
    python bench/suite_time.py report.xml           # from python -m pytest tests --junitxml=report.xml
    python bench/suite_time.py --run tests/unit     # runs pytest on the paths given, then reports
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.suite_time import (  # noqa: E402
    TIMEOUT_PROPERTY,
    TimedTest,
    by_file,
    file_table,
    near_timeout,
    read_times,
)


def from_junit(path: str) -> list[TimedTest]:
    """Each testcase's time from a JUnit XML file, named as pytest names the test."""
    times = []
    for case in ET.parse(path).getroot().iter("testcase"):
        module = case.get("classname", "")
        parts = module.split(".")
        # pytest writes classname as the dotted module path (and class): rebuild the file path
        for cut in range(len(parts), 0, -1):
            candidate = Path(ROOT, *parts[:cut]).with_suffix(".py")
            if candidate.exists():
                nodeid = "::".join([candidate.relative_to(ROOT).as_posix(), *parts[cut:],
                                    case.get("name", "")])
                break
        else:
            nodeid = f"{module}::{case.get('name', '')}"
        timeout = next((p.get("value") for p in case.iter("property")
                        if p.get("name") == TIMEOUT_PROPERTY), None)
        times.append(TimedTest(nodeid, float(case.get("time", 0.0)),
                              float(timeout) if timeout not in (None, "None") else None))
    return times


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("source", nargs="*", help="a --suite-times JSON or a JUnit XML file; "
                        "with --run, the test paths to run")
    parser.add_argument("--run", action="store_true", help="run pytest on the paths first")
    parser.add_argument("--most", type=int, default=25, help="files listed (default 25)")
    args = parser.parse_args()
    if args.run:
        with tempfile.TemporaryDirectory() as tmp:
            out = str(Path(tmp) / "times.json")
            subprocess.run([sys.executable, "-m", "pytest", *(args.source or ["tests"]), "-q",
                            f"--suite-times={out}"], cwd=ROOT, check=False)
            times = read_times(out)
    elif len(args.source) == 1:
        path = args.source[0]
        times = from_junit(path) if path.endswith(".xml") else read_times(path)
    else:
        parser.error("give one --suite-times JSON or JUnit XML file, or --run with test paths")
    for line in file_table(times, args.most):
        print(line)
    near = near_timeout(times)
    for t in near:
        print(f"over half its timeout: {t.seconds:.1f} s of {t.timeout:g} s  {t.nodeid}")
    total = sum(t.seconds for t in times)
    slowest = max(times, key=lambda t: t.seconds)
    print(f"headline: {len(times)} tests, {total / 60:.1f} min of test time; the slowest file "
          f"{by_file(times)[0].file}; the slowest test {slowest.nodeid} "
          f"({slowest.seconds:.1f} s); {len(near)} over half their timeout")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
