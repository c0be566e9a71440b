"""The path of one class through the package: the files its calls enter from ``GateRun.run``
to its ``ClassResult``, on a protocol-faithful vLLM test server (no GPU, no real server).

Traced with ``sys.setprofile``: every call into and return to a package file moves the walk to
that file. It prints the files entered (rooms), the runs of consecutive calls in one file
(stays), the stays in a file already left before (climbs back), and the files entered both
before the requests begin (``measure_at``) and after they end: a file on both sides is one
that mixes setting a class up with judging it. Planning (``GateRun.prepare``) is left out, as
it runs once for every class of the run before the first is measured.

    python bench/class_path.py            # the summary
    python bench/class_path.py --walk     # and the walk itself, one stay per line
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from pytest_specbound.gate.pipeline.pool import ServerPool  # noqa: E402
from pytest_specbound.gate.pipeline.run import GateRun  # noqa: E402
from pytest_specbound.gate.schema.budget import load_budget  # noqa: E402
from pytest_specbound.gate.schema.settings import resolve  # noqa: E402
from pytest_specbound.physics.hardware import parse_hardware  # noqa: E402
from tests.servers.fake import FakeServer, Script  # noqa: E402

PKG = str(HERE.parent / "pytest_specbound")
BUDGET = """
[model]
name = "llama-3.1-8b"
served_name = "test-model"
[speculative]
method = "eagle3"
steps = 3
[server]
backend = "vllm"
url = "{url}"
[classes.chat]
prompts = "chat"
max_tokens = 41
accept = [2.0, 4.0]
min_efficiency = 0.1
"""


class Walk:
    """The package files a run of calls moves through, in order, one entry per stay."""

    def __init__(self) -> None:
        self.stays: list[str] = []
        self.measuring: tuple[int, int] | None = None  # stays before and after the requests
        self._depth_in_load = 0

    def _at(self, frame: object) -> None:
        path = getattr(getattr(frame, "f_code", None), "co_filename", "")
        if not path.startswith(PKG):
            return
        room = path[len(PKG) + 1:]
        if not self.stays or self.stays[-1] != room:
            self.stays.append(room)

    def profile(self, frame: object, event: str, arg: object) -> None:
        if event == "call":
            code = getattr(frame, "f_code", None)
            if code is not None and code.co_name == "measure_at":
                self.measuring = (len(self.stays), -1)
            self._at(frame)
        elif event == "return":
            code = getattr(frame, "f_code", None)
            if code is not None and code.co_name == "measure_at" and self.measuring:
                self.measuring = (self.measuring[0], len(self.stays))
            self._at(getattr(frame, "f_back", None))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--walk", action="store_true", help="print every stay")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp, FakeServer("vllm", Script(step_s=0.004)) as srv:
        path = Path(tmp) / "b.toml"
        path.write_text(BUDGET.format(url=srv.url))
        budget = load_budget(path)
        settings = resolve({"specbound_hw": "h100", "specbound_log_dir": tmp}, {},
                           lambda name: None)
        gate = GateRun(parse_hardware("h100"), settings, ServerPool(Path(tmp)))
        gate.prepare([(budget, "chat", 1)])
        walk = Walk()
        sys.setprofile(walk.profile)
        try:
            result = gate.run(budget, "chat", 1)
        finally:
            sys.setprofile(None)
    rooms = sorted(set(walk.stays))
    seen: set[str] = set()
    climbs = 0
    for room in walk.stays:
        climbs += room in seen
        seen.add(room)
    before_at, after_at = walk.measuring or (len(walk.stays), len(walk.stays))
    before = set(walk.stays[:before_at])
    after = set(walk.stays[after_at:]) if after_at >= 0 else set()
    both = sorted(before & after)
    if args.walk:
        for i, room in enumerate(walk.stays):
            mark = " <- the requests begin" if i == before_at else \
                " <- the requests have ended" if i == after_at else ""
            print(f"{i:4d} {room}{mark}")
    print(f"one class, {result.samples} requests, verdict {result.status}: "
          f"{len(rooms)} files entered, {len(walk.stays)} stays, {climbs} climbs back")
    print(f"before the requests: {len(before)} files; after: {len(after)}; on both sides: "
          f"{len(both)}" + (f" ({', '.join(both)})" if both else ""))
    print("files: " + ", ".join(rooms))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
