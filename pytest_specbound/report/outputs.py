"""What a pytest run writes about its classes: the results JSON (kept current while it runs),
the benchmark JSON, the plot, the CI step summary, and the terminal summary's lines."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

from pytest_specbound.gate.schema.settings import Settings
from pytest_specbound.gate.verdicts.result import ClassResult, basename
from pytest_specbound.physics.hardware import Hardware
from pytest_specbound.physics.render import components_line
from pytest_specbound.report.results import RunInfo


class Outputs:
    """The finished and running class results of one run, and every file made from them."""

    def __init__(self, settings: Settings, hardware: Callable[[], Hardware | None],
                 update_identity: Callable[[dict[str, object]], None] | None = None,
                 update_json: Callable[[dict[str, object]], None] | None = None) -> None:
        self.settings = settings
        self._hardware = hardware
        self._update_identity = update_identity  # users' additions (the plugin's hooks)
        self._update_json = update_json
        self.results: list[ClassResult] = []
        self.running: dict[str, ClassResult] = {}  # nodeid -> the result so far
        self._identity: dict[str, object] | None = None  # taken once, at the first write

    def __bool__(self) -> bool:
        return bool(self.results or self.running)

    def finished(self, result: ClassResult) -> None:
        self.results.append(result)
        self.write_json(partial=True)

    def identity(self) -> dict[str, object]:
        """This run's identity (machine, commit, version, start), taken once."""
        if self._identity is None:
            from pytest_specbound.gate.references.identity import run_identity

            hw = self._hardware()
            identity = run_identity(on_gpu=bool(hw and hw.name != "cpu"))
            if self._update_identity:
                self._update_identity(identity)
            self._identity = identity
        return self._identity

    def run_info(self) -> RunInfo:
        hw = self._hardware()
        return {"hardware": hw.describe() if hw else None, "identity": self.identity(),
                "budgets": {r.budget: r.budget_sha256 for r in self.results},
                "servers": {r.budget: r.server.to_json() for r in self.results},
                "models": sorted({r.model for r in self.results if r.model}),
                "confidence": self.settings.confidence}

    def write_json(self, partial: bool) -> None:
        """The results file, atomically; running classes are in it, marked partial."""
        path = self.settings.json_path
        if not path:
            return
        from pytest_specbound.report.results import write_results

        rows = self.results + list(self.running.values())
        write_results(path, rows, partial or bool(self.running), self.run_info(),
                      self._update_json)

    def write_extras(self) -> None:
        s = self.settings
        if s.benchmark_json:
            from pytest_specbound.report.results import write_benchmark

            write_benchmark(s.benchmark_json, self.results, self.run_info())
        if s.plot:
            from pytest_specbound.report.plot import write_plot

            write_plot(s.plot, self.results)
        summary = os.environ.get("GITHUB_STEP_SUMMARY")
        if summary:
            from pytest_specbound.report.table import markdown

            with open(summary, "a", encoding="utf-8") as f:
                f.write(markdown(self.results))

    def summary_lines(self) -> list[str]:
        """The terminal summary: the table, one roofline line per model and hardware, the file."""
        from pytest_specbound.report.table import terminal

        lines = terminal(self.results).splitlines()
        levels: dict[tuple[str, str, int], list[ClassResult]] = {}
        for r in self.results:
            if r.roofline is not None:
                levels.setdefault((r.budget, r.hardware, r.roofline.batch), []).append(r)
        for same in levels.values():
            r = same[0]
            roof = r.roofline
            assert roof is not None
            physics = roof.physics
            batch = f" at batch {roof.batch}" if roof.batch > 1 else ""
            measured = [f"{x.class_name} {x.roofline.prefill_ms:.1f}" for x in same
                        if x.roofline and x.roofline.prefill_ms]
            prefill = (f"; plus other requests' prefill per round, measured: "
                       f"{', '.join(measured)} ms" if measured else "")
            lines.append(f"roofline {r.model} ({basename(r.budget)}) on {r.hardware}{batch}: "
                         f"{roof.physics_round_ms:.1f} ms per round = "
                         f"{components_line(physics)}, bound: {roof.bound}{prefill}")
        if self.settings.json_path:
            lines.append(f"specbound results: {Path(self.settings.json_path)}")
        return lines
