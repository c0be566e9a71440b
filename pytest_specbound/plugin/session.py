"""The run's state as pytest sees it: settings, hardware, the server pool, outputs; running one
class for an item, and the session hooks that write the results."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from pytest_specbound._toml import TomlTable

if TYPE_CHECKING:
    from pytest_specbound.gate.pipeline.pool import ServerPool
    from pytest_specbound.gate.pipeline.run import GateRun
    from pytest_specbound.gate.references.reference import Wanted
    from pytest_specbound.gate.schema.budget import Budget
    from pytest_specbound.gate.schema.settings import Settings
    from pytest_specbound.gate.verdicts.result import ClassResult
    from pytest_specbound.gate.verdicts.verdict import Verdict
    from pytest_specbound.physics.hardware import Hardware
    from pytest_specbound.report.outputs import Outputs
    from pytest_specbound.report.progress import Progress

PROPERTY = "specbound"
SHARED_DIR = "specbound_shared_dir"  # workerinput key: the folder xdist workers share


class XdistSharing:
    """Registered only with pytest-xdist: the controller names one folder all workers share
    (for the server pool's state), passed through ``workerinput``."""

    def __init__(self) -> None:
        self.folder: str | None = None

    def pytest_configure_node(self, node: Any) -> None:
        if self.folder is None:
            import tempfile

            self.folder = tempfile.mkdtemp(prefix="specbound-xdist-")
        node.workerinput[SHARED_DIR] = self.folder

    def pytest_unconfigure(self, config: pytest.Config) -> None:
        if self.folder is not None:
            import shutil

            shutil.rmtree(self.folder, ignore_errors=True)


SESSION: pytest.StashKey[SpecboundSession] = pytest.StashKey()


class VerdictFailure(Exception):
    """A failed gate: rendered as its verdict text, without a traceback."""


class SpecboundSession:
    """Session state (registered plugin object): hardware, servers, results."""

    def __init__(self, config: pytest.Config, settings: Settings, hardware: Hardware | None) -> None:
        self.config = config
        self.settings = settings
        self._hardware = hardware
        self._hw_checked = hardware is not None
        self._skip_reason = ""
        self._pool: ServerPool | None = None
        self._outputs: Outputs | None = None
        self.controller = not hasattr(config, "workerinput")
        self._restore_signals: Callable[[], None] | None = None
        self.wanted: list[Wanted] = []  # the budget items this session runs (plugin/collect.py)
        self._gate: GateRun | None = None
        self._prepared = False  # every collected class planned (retried if it raised)

    # -- session resources ---------------------------------------------------------------
    @property
    def hardware(self) -> Hardware | None:
        if not self._hw_checked:
            self._hw_checked = True
            try:
                from pytest_specbound.physics.hardware import detect_hardware

                self._hardware = detect_hardware()
            except Exception as exc:  # no NVML, no GPU: say what to pass
                self._skip_reason = (
                    "specbound: no hardware given and none detected "
                    f"({str(exc).split(': ', 1)[-1]}); pass --specbound-hw=NAME "
                    "(e.g. a6000x2, h100x8, cpu) or set SPECBOUND_HW"
                )
        return self._hardware

    def skip_reason(self) -> str:
        return self._skip_reason or "specbound: no hardware"

    @property
    def pool(self) -> ServerPool:
        if self._pool is None:
            from pytest_specbound.gate.pipeline.pool import ServerPool, worker_id

            workerinput = getattr(self.config, "workerinput", None)  # xdist's public channel
            shared = Path(workerinput[SHARED_DIR]) if workerinput and SHARED_DIR in workerinput \
                else None
            self._pool = ServerPool(self.settings.log_dir, shared, worker_id(), say=self._say)
        return self._pool

    @property
    def outputs(self) -> Outputs:
        if self._outputs is None:
            from pytest_specbound.report.outputs import Outputs

            hook = self.config.hook
            self._outputs = Outputs(
                self.settings, lambda: self._hardware,
                lambda identity: hook.pytest_specbound_update_identity(config=self.config,
                                                                       identity=identity),
                lambda doc: hook.pytest_specbound_update_json(config=self.config,
                                                              output_json=doc))
        return self._outputs

    def levels(self, budget: Budget, cls_name: str) -> tuple[int, ...]:
        """The concurrency levels a class runs at: ``--specbound-concurrency``, else its own."""
        from pytest_specbound.gate.pipeline.run import levels_of

        return levels_of(self.settings, budget, cls_name)

    @property
    def gate(self) -> GateRun:
        """The run: every collected class planned, and its twins measured, before the first."""
        if self._gate is None:
            from pytest_specbound.gate.pipeline.run import REFERENCES, GateRun

            hw = self.hardware
            assert hw is not None
            references = dict(REFERENCES)
            self.config.hook.pytest_specbound_add_references(config=self.config,
                                                             references=references)
            self._gate = GateRun(hw, self.settings, self.pool, self.outputs.identity, self._say,
                                 references)
        return self._gate

    def run(self, budget: Budget, cls_name: str, item: pytest.Item,
            concurrency: int = 1) -> ClassResult:
        from dataclasses import replace

        from pytest_specbound.errors import SpecboundError
        from pytest_specbound.gate.pipeline.runner import Hooks
        from pytest_specbound.gate.verdicts.result import ClassResult
        from pytest_specbound.gate.verdicts.verdict import Verdict

        progress = self._progress(item.nodeid)
        running = self.outputs.running

        def partial(result: ClassResult) -> None:
            running[item.nodeid] = replace(result, nodeid=item.nodeid)
            if self.controller:
                self.outputs.write_json(partial=True)

        hooks = Hooks(progress.update if progress else None, partial,
                      progress.waiting if progress else self._say)
        try:
            if not self._prepared:
                self.gate.prepare(self.wanted)
                self._prepared = True
            result = self.gate.run(budget, cls_name, concurrency, hooks)
        except KeyboardInterrupt:
            raise  # the partial entry stays in the running results and is written as such
        except SpecboundError as exc:
            running.pop(item.nodeid, None)
            self._record(item, ClassResult(str(budget.path), cls_name, self.gate.hw.label,
                                           Verdict("error", [str(exc)], ("setup",)),
                                           concurrency=concurrency,
                                           level_ids=self.levels(budget, cls_name) != (1,)))
            raise
        running.pop(item.nodeid, None)
        return self._record(item, result)

    def _record(self, item: pytest.Item, result: ClassResult) -> ClassResult:
        """Results travel on the test report (xdist-safe) and land in JUnit properties."""
        from dataclasses import replace

        result = replace(result, nodeid=item.nodeid)
        item.user_properties.append((PROPERTY, json.dumps(result.to_json(), default=str)))
        v = result.verdict
        for key, value in (("accept_length", result.accept_length),
                           ("decode_tok_s", result.decode_tok_s),
                           ("roofline_tok_s", v.roofline_tok_s), ("efficiency", v.efficiency),
                           ("verdict", v.status)):
            item.user_properties.append((f"specbound_{key}", value))
        return result

    def _writer(self, least: int = 0) -> tuple[Callable[[str, bool], None], bool] | None:
        """write(text, rewrite) to the terminal with capture suspended, and whether it is a TTY;
        None below verbosity ``least``.

        Under xdist a worker's terminal output is not shown, so workers write to stderr.
        """
        if self.config.get_verbosity() < least:
            return None
        if not self.controller:
            import sys

            def to_stderr(text: str, rewrite: bool) -> None:
                if sys.__stderr__ is not None:
                    sys.__stderr__.write(text + "\n")

            return to_stderr, False
        reporter = self.config.pluginmanager.get_plugin("terminalreporter")
        if reporter is None:
            return None
        capman = self.config.pluginmanager.get_plugin("capturemanager")

        def write(text: str, rewrite: bool) -> None:
            with capman.global_and_fixture_disabled() if capman else _nullcontext():
                if rewrite:
                    reporter.rewrite(text, erase=True)
                else:
                    reporter.write_line(text)

        return write, bool(getattr(reporter, "isatty", False))

    def _say(self, line: str) -> None:
        """A line the user waits on (a server not answering, a lock held, a twin measured):
        shown under ``-q`` too, hidden by ``-qq``."""
        writer = self._writer(least=-1)
        if writer is not None:
            writer[0](f"specbound: {line}", False)

    def _progress(self, nodeid: str) -> Progress | None:
        from pytest_specbound.report.progress import Progress

        writer = self._writer()
        if writer is None or not self.controller:
            return None
        return Progress(writer[0], nodeid, writer[1])

    # -- hooks ---------------------------------------------------------------------------
    def pytest_sessionstart(self, session: pytest.Session) -> None:
        from pytest_specbound import interrupts

        # SIGTERM (CI cancel, timeout) becomes an interrupt: servers stopped, results kept; and
        # no Ctrl-C is lost to a finalizer while a server loads
        self._restore_signals = interrupts.install()

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if not self.controller:
            return
        for name, value in report.user_properties:
            if name == PROPERTY and report.when == "call":
                from pytest_specbound.gate.verdicts.result import ClassResult

                self.outputs.finished(ClassResult.from_json(json.loads(str(value))))

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        if not self.controller or self._outputs is None or not self._outputs.results:
            return
        terminalreporter.write_sep("=", "specbound summary")
        for line in self._outputs.summary_lines():
            terminalreporter.write_line(line)

    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        try:
            if self._pool is not None:
                self._pool.close()
        finally:
            if self._restore_signals is not None:
                self._restore_signals()
                self._restore_signals = None
        if not self.controller or not self._outputs:
            return
        interrupted = int(exitstatus) == int(pytest.ExitCode.INTERRUPTED)
        from pytest_specbound.errors import SpecboundError

        try:
            self._outputs.write_json(partial=interrupted)
            self._outputs.write_extras()
        except (OSError, SpecboundError) as exc:  # checked at start; a disk can still fill up
            where = f"{exc.filename}: " if isinstance(exc, OSError) and exc.filename else ""
            why = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
            sys.stderr.write(f"specbound: error: results not written: {where}{why}\n")
            if session.exitstatus == pytest.ExitCode.OK:
                session.exitstatus = pytest.ExitCode.INTERNAL_ERROR

    def pytest_keyboard_interrupt(self, excinfo: Any) -> None:
        if self._pool is not None:
            self._pool.stop_owned_now()
        if self.controller and self._outputs is not None:
            self._outputs.write_json(partial=True)


def _nullcontext() -> Any:
    import contextlib

    return contextlib.nullcontext()


def session_of(config: pytest.Config) -> SpecboundSession:
    return config.stash[SESSION]


def outcome_for(verdict: Verdict, settings: Settings) -> None:
    """Raise what pytest should see for ``verdict``: nothing (pass), skip or failure."""
    if verdict.status == "pass":
        return
    if verdict.status == "inconclusive":
        if settings.inconclusive == "pass":
            return
        if settings.inconclusive == "skip":
            pytest.skip("specbound: inconclusive: " + "; ".join(verdict.lines))
    raise VerdictFailure(verdict)


def parse_marker(node: pytest.Item, overrides: TomlTable) -> tuple[Budget, str]:
    """The test's marker (and call-time overrides) as a Budget: the budget files' own parser."""
    from pytest_specbound.errors import ConfigError
    from pytest_specbound.gate.schema.markers import marker_budget

    mark = node.get_closest_marker("specbound")
    kw = {**(mark.kwargs if mark else {}), **overrides}
    try:
        return marker_budget(kw, node.nodeid, Path(str(node.path)), Path(node.config.rootpath))
    except ConfigError as exc:
        raise pytest.UsageError(str(exc)) from None
