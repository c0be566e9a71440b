"""Closed-loop load: N streams, each sending its next request when its previous one ends.

Each stream is a thread with its own :class:`Sampler` (its own connection pool). Every stream
runs the warm-up, then all meet at a barrier and the level's window opens: from there each
request is counted (or kept apart as untimed) in the order it was *sent*, and the stopping rule
looks at the measurement so far. A request that finishes before one sent earlier waits for it:
the first N finished would favour the prompts that finish quickly (at a different mix at each
draft length, or in each block of a side-by-side check), the first N sent are the same prompts
every time. When the rule stops, no stream sends again; the requests still in flight, and those
finished but waiting, are kept as *drained* (they loaded the server, so they count in the
overlaps, but the rule did not see them). Where the server gives no per-request accept figures,
its counters are read when the window opens and after each counted request: every request in
the window is ours (the measurement lock), so the counter deltas over the window are the
level's accept length.
"""

from __future__ import annotations

import contextlib
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence

from pytest_specbound import interrupts
from pytest_specbound.errors import RequestError
from pytest_specbound.measure.measurement import Measurement, Stop
from pytest_specbound.measure.sampler import Collector, Sampler, Stopping, Workload
from pytest_specbound.serving.backends.base import Backend
from pytest_specbound.serving.prometheus import counter_delta
from pytest_specbound.serving.records import RequestRecord, ServerInfo
from pytest_specbound.serving.transport import Endpoint

JOIN_POLL_S = 0.2  # the main thread wakes this often (Ctrl-C lands in the main thread only)
# A receiver thread that wakes on a socket read waits for the GIL up to the interpreter's switch
# interval (5 ms) while another stream parses its finished request, and stamps its read that
# late. N synchronised streams finish together, so at N = 16 the last tokens were stamped late
# enough to read decode rates 1% low (bench/client_streams.py); at 0.2 ms the error is 0.05%.
SWITCH_INTERVAL_S = 0.0002


@contextlib.contextmanager
def prompt_gil_handoff() -> Iterator[None]:
    """Shorten the interpreter's switch interval while N streams run, then restore it."""
    before = sys.getswitchinterval()
    sys.setswitchinterval(min(before, SWITCH_INTERVAL_S))
    try:
        yield
    finally:
        sys.setswitchinterval(before)


class CounterWindow:
    """Accept length from the server's counters over the level's window (all requests ours)."""

    def __init__(self, backend: Backend, endpoint: Endpoint) -> None:
        self.backend = backend
        self.endpoint = endpoint
        self.start: dict[str, float] | None = None
        self.drained_sum: dict[str, float] = {}  # backends whose metrics reset on read
        # the counters stopped covering our requests: one went down (a restart) or grew less
        # than the tokens we received (a restart, or /metrics answered by another replica)
        self.restarted = False

    def _scrape(self) -> dict[str, float] | None:
        try:
            return self.backend.scrape(self.endpoint)
        except RequestError:
            return None

    def open(self) -> None:
        self.start = self._scrape()

    def accept(self, requests: int, received: int = 0) -> float | None:
        """Accept over the window so far, ``requests`` requests sent in it (their first tokens
        are prefill, taken out; a request still in flight may have none yet: a few tokens off
        in the middle, exact once the window is drained); ``received``: the tokens of the
        window's finished requests, which the server's own count cannot be under."""
        now = self._scrape()
        if now is None or self.start is None or self.restarted:
            return None
        if self.backend.drains_metrics:
            for key, value in now.items():
                self.drained_sum[key] = self.drained_sum.get(key, 0.0) + value
            delta: dict[str, float] | None = dict(self.drained_sum)
        else:
            delta = counter_delta(self.start, now)
        generated = self.backend.generated_counter
        if delta is None or (generated in delta and delta[generated] < received):
            self.restarted = True  # counts from before a restart are gone: no figure spans it
            return None
        return self.backend.accept_from_deltas(delta, requests)


def measure_closed_loop(
    samplers: Sequence[Sampler],
    workload: Workload,
    stopping: Stopping,
    on_record: Callable[[Measurement], None] | None = None,
    info: ServerInfo | None = None,
    window: CounterWindow | None = None,
) -> Measurement:
    """Keep ``len(samplers)`` requests in flight until ``stopping`` (see the module text).

    ``window``, when given, supplies the accept length from server counters for as long as no
    request carries its own. Ctrl-C: the measurement so far goes to ``on_record`` and the
    interrupt propagates (the stream threads are daemons; the server is stopped by the caller).
    """
    got = Collector(samplers[0].backend.name, stopping.rule, workload.warmup, stopping.max_untimed,
                    info, concurrency=len(samplers))
    loop = _ClosedLoop(got, workload, stopping, on_record, window)
    return loop.run(samplers)


class _ClosedLoop:
    """The streams of one level and what they share: the collector, the lock, the stop."""

    def __init__(self, got: Collector, workload: Workload, stopping: Stopping,
                 on_record: Callable[[Measurement], None] | None,
                 window: CounterWindow | None) -> None:
        self.got, self.rule, self.window = got, stopping.rule, window
        self.prompts, self.max_tokens = workload.prompts, workload.max_tokens
        self.warmup = workload.warmup
        self.max_seconds, self.on_record = stopping.max_seconds, on_record
        self.lock = threading.Lock()
        self.stop = threading.Event()
        self.ended: list[tuple[Stop, str]] = []
        self.crashed: list[BaseException] = []
        self.sent = 0  # requests sent since the window opened (the next one's send order)
        self.waiting: dict[int, RequestRecord] = {}  # finished before one sent earlier
        self.next_counted = 0  # the send order of the next request the rule sees
        self.most_sent = 0  # set by run()
        self.deadline: float | None = None
        self.barrier: threading.Barrier | None = None

    def opened(self) -> None:
        """The barrier's action: one thread runs it while the others wait."""
        self.got.start()
        if self.window is not None:
            self.window.open()
            self.got.window_counters = self.window.start is not None
        if self.max_seconds is not None:
            self.deadline = time.monotonic() + self.max_seconds

    def finish(self, reason: tuple[Stop, str]) -> None:
        if not self.ended:
            self.ended.append(reason)
        self.stop.set()

    def read_window(self) -> None:
        assert self.window is not None
        self.got.window_accept = self.window.accept(self.sent, self.got.received_tokens)
        self.got.counters_restarted = self.window.restarted

    def over_time(self) -> tuple[Stop, str] | None:
        if self.deadline is not None and time.monotonic() > self.deadline:
            return Stop.TIME_BUDGET, f"time budget of {self.max_seconds:g} s"
        return None

    def arrived(self, order: int, record: RequestRecord) -> None:
        """Under the lock: the request sent ``order``-th in the window has finished; count it
        and those sent after it that finished first, in the order they were sent."""
        if self.stop.is_set():
            self.got.drain(record)
            return
        self.waiting[order] = record
        while self.next_counted in self.waiting and not self.stop.is_set():
            self.count(self.waiting.pop(self.next_counted))
            self.next_counted += 1
        if self.waiting and (late := self.over_time()):
            self.finish(late)  # the time budget holds even while the rule waits on a slow one
        if self.stop.is_set():
            self.drain_waiting()

    def drain_waiting(self) -> None:
        for order in sorted(self.waiting):
            self.got.drain(self.waiting[order])
        self.waiting.clear()

    def count(self, record: RequestRecord) -> None:
        """Under the lock: count, look, report."""
        got = self.got
        reason = got.add(record)
        if self.window and got.wants_window_accept and self.rule.looks_at(len(got.records)):
            self.read_window()  # one scrape per look, not per request
        if reason is None:
            reason = self.rule.stop_reason(got.now())
        if reason is None:
            reason = self.over_time()
        if reason is not None:
            self.finish(reason)
        elif self.on_record:
            self.on_record(got.now())

    def stream(self, sampler: Sampler) -> None:
        assert self.barrier is not None
        prompts = self.prompts
        try:
            for i in range(self.warmup):
                sampler.one(prompts[i % len(prompts)], self.max_tokens)
            self.barrier.wait()
            while not self.stop.is_set():
                with self.lock:
                    if self.sent >= self.most_sent:
                        return  # the rest wait on a slow early request: no more load than planned
                    i = self.sent
                    self.sent += 1
                record = sampler.one(prompts[i % len(prompts)], self.max_tokens)
                with self.lock:
                    self.arrived(i, record)
        except threading.BrokenBarrierError:
            return
        except BaseException as exc:  # surfaced in the main thread, never lost in this one
            with self.lock:
                self.crashed.append(exc)
                self.finish((Stop.REQUEST_FAILED, f"a stream crashed: {exc!r}"))
                self.drain_waiting()
            self.barrier.abort()

    def run(self, samplers: Sequence[Sampler]) -> Measurement:
        # what the rule may count, the untimed it may retry, and one in flight per stream: the
        # most a level sends, however long one early request keeps the rule waiting
        self.most_sent = self.rule.sample_budget + self.got.allowance + len(samplers)
        self.barrier = threading.Barrier(len(samplers), action=self.opened)
        threads = [threading.Thread(target=self.stream, args=(s,), daemon=True,
                                    name=f"specbound-stream-{k}") for k, s in enumerate(samplers)]
        try:
            with prompt_gil_handoff():
                for t in threads:
                    t.start()
                for t in threads:
                    while t.is_alive():
                        t.join(JOIN_POLL_S)
                        interrupts.check()
        except KeyboardInterrupt:
            self.stop.set()
            self.barrier.abort()
            with self.lock:
                self.drain_waiting()
                m = self.got.now(Stop.INTERRUPTED, "interrupted", interrupted=True)
            if self.on_record:
                self.on_record(m.with_overlaps())
            raise
        if self.crashed:
            raise self.crashed[0]
        self.drain_waiting()  # none after a stop; kept, should a stream have ended otherwise
        if self.window and self.got.wants_window_accept:
            self.read_window()  # drained: exact over the whole window
        reason = self.ended[0] if self.ended else (Stop.SAMPLE_BUDGET, "no stream left")
        return self.got.now(*reason).with_overlaps()


def stream_samplers(sampler: Sampler, n: int) -> list[Sampler]:
    """``n`` samplers like ``sampler``, each with a connection of its own, none scraping
    counters per request (other streams move them)."""
    return [Sampler(sampler.endpoint.clone(), sampler.backend, sampler.model, sampler.max_accept,
                    counters_per_request=False, sampling=sampler.sampling,
                    drafting=sampler.drafting) for _ in range(n)]


def measure_at(sampler: Sampler, level: int, workload: Workload, stopping: Stopping,
               on_record: Callable[[Measurement], None] | None = None,
               info: ServerInfo | None = None) -> Measurement:
    """One stream at level 1 (:func:`~pytest_specbound.measure.sampler.measure`), else a closed
    loop of ``level`` streams with the server's counters read around it: what the gate and
    ``specbound measure`` both send."""
    from pytest_specbound.measure.sampler import measure

    if level == 1:
        return measure(sampler, workload, stopping, on_record, info=info)
    return measure_closed_loop(stream_samplers(sampler, level), workload, stopping, on_record,
                               info=info, window=CounterWindow(sampler.backend, sampler.metrics_endpoint))
