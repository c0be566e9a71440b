"""What installing pytest-specbound adds to a pytest run that does not use it.

Two measurements, side by side in one run: ``python -X importtime`` of the plugin module after
pytest is imported (the import the entry point triggers), and wall time of ``pytest --co`` in an
empty folder with the plugin loaded vs ``-p no:specbound``, interleaved. Target: <= 15 ms.
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import tempfile
import time


def import_ms() -> float:
    proc = subprocess.run([sys.executable, "-X", "importtime", "-c",
                           "import pytest; import pytest_specbound.plugin"],
                          capture_output=True, text=True, check=True)
    total = 0
    for line in proc.stderr.splitlines():
        parts = line.split("|")
        if len(parts) == 3 and parts[2].strip() == "pytest_specbound.plugin":
            total = int(parts[1])  # cumulative microseconds, children included
    return total / 1e3


def pytest_start_s(folder: str, disable: bool) -> float:
    args = [sys.executable, "-m", "pytest", "--co", "-q", "-p", "no:cacheprovider"]
    if disable:
        args += ["-p", "no:specbound"]
    t = time.perf_counter()
    subprocess.run(args, cwd=folder, capture_output=True)
    return time.perf_counter() - t


def main() -> None:
    imports = [import_ms() for _ in range(7)]
    with tempfile.TemporaryDirectory() as folder:
        with_plugin, without = [], []
        for _ in range(10):
            with_plugin.append(pytest_start_s(folder, False))
            without.append(pytest_start_s(folder, True))
    a, b = statistics.median(with_plugin), statistics.median(without)
    print(f"{'measure':<40} {'median':>10}")
    print(f"{'import pytest_specbound.plugin (-X importtime)':<40} {statistics.median(imports):>8.2f} ms")
    print(f"{'pytest --co, plugin loaded':<40} {a * 1e3:>8.1f} ms")
    print(f"{'pytest --co, -p no:specbound':<40} {b * 1e3:>8.1f} ms")
    print(f"wall ratio with/without: {a / b:.3f} ({(a - b) * 1e3:+.1f} ms, noisy)")
    print(f"headline: the plugin adds {statistics.median(imports):.2f} ms of import "
          f"(target <= 15 ms)")


if __name__ == "__main__":
    main()
