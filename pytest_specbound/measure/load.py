"""Closed-loop load: N streams, each sending its next request when its previous one ends.

Each stream is a thread with its own :class:`Sampler` (its own connection pool). Every stream
runs the warm-up, then all meet at a barrier and the level's window opens: from there each
completed request is counted (or kept apart as untimed) and the stopping rule looks at the
measurement so far. When the rule stops, no stream sends again; the requests still in flight
finish and are kept as *drained* (they loaded the server, so they count in the overlaps, but the
rule did not see them). Where the server gives no per-request accept figures, its counters are
read when the window opens and after each counted request: every request in the window is ours
(the measurement lock), so the counter deltas over the window are the level's accept length.
"""

from __future__ import annotations

import contextlib
import itertools
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence

from pytest_specbound.errors import RequestError
from pytest_specbound.measure.measurement import Measurement, Stop
from pytest_specbound.measure.sampler import Collector, Sampler, StoppingRule
from pytest_specbound.serving.backends.base import Backend, Prompt
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
    prompts: Sequence[Prompt],
    max_tokens: int,
    rule: StoppingRule,
    warmup: int = 1,
    max_seconds: float | None = None,
    on_record: Callable[[Measurement], None] | None = None,
    max_untimed: int | None = None,
    info: ServerInfo | None = None,
    window: CounterWindow | None = None,
) -> Measurement:
    """Keep ``len(samplers)`` requests in flight until ``rule`` stops (see the module text).

    ``window``, when given, supplies the accept length from server counters for as long as no
    request carries its own. Ctrl-C: the measurement so far goes to ``on_record`` and the
    interrupt propagates (the stream threads are daemons; the server is stopped by the caller).
    """
    n = len(samplers)
    got = Collector(samplers[0].backend.name, rule, warmup, max_untimed, info, concurrency=n)
    lock = threading.Lock()
    stop = threading.Event()
    ended: list[tuple[Stop, str]] = []
    crashed: list[BaseException] = []
    order = itertools.count()
    sent = [0]  # requests sent since the window opened
    deadline: list[float | None] = [None]

    def opened() -> None:  # the barrier's action: one thread runs it, the others wait
        got.start()
        if window is not None:
            window.open()
            got.window_counters = window.start is not None
        deadline[0] = time.monotonic() + max_seconds if max_seconds is not None else None

    barrier = threading.Barrier(n, action=opened)

    def finish(reason: tuple[Stop, str]) -> None:
        if not ended:
            ended.append(reason)
        stop.set()

    def count(record: RequestRecord) -> None:
        """Under the lock: count, look, report."""
        if stop.is_set():
            got.drain(record)
            return
        reason = got.add(record)
        if window and got.wants_window_accept and rule.looks_at(len(got.records)):
            # one scrape per look, not per request
            got.window_accept = window.accept(sent[0], got.received_tokens)
            got.counters_restarted = window.restarted
        if reason is None:
            reason = rule.stop_reason(got.now())
        if reason is None and deadline[0] is not None and time.monotonic() > deadline[0]:
            reason = (Stop.TIME_BUDGET, f"time budget of {max_seconds:g} s")
        if reason is not None:
            finish(reason)
        elif on_record:
            on_record(got.now())

    def stream(sampler: Sampler) -> None:
        try:
            for i in range(warmup):
                sampler.one(prompts[i % len(prompts)], max_tokens)
            barrier.wait()
            while not stop.is_set():
                with lock:
                    i = next(order)
                    sent[0] += 1
                record = sampler.one(prompts[i % len(prompts)], max_tokens)
                with lock:
                    count(record)
        except threading.BrokenBarrierError:
            return
        except BaseException as exc:  # surfaced in the main thread, never lost in this one
            with lock:
                crashed.append(exc)
                finish((Stop.REQUEST_FAILED, f"a stream crashed: {exc!r}"))
            barrier.abort()

    threads = [threading.Thread(target=stream, args=(s,), daemon=True,
                                name=f"specbound-stream-{k}") for k, s in enumerate(samplers)]
    try:
        with prompt_gil_handoff():
            for t in threads:
                t.start()
            for t in threads:
                while t.is_alive():
                    t.join(JOIN_POLL_S)
    except KeyboardInterrupt:
        stop.set()
        barrier.abort()
        with lock:
            m = got.now(Stop.INTERRUPTED, "interrupted", interrupted=True)
        if on_record:
            on_record(m.with_overlaps())
        raise
    if crashed:
        raise crashed[0]
    if window and got.wants_window_accept:
        got.window_accept = window.accept(sent[0], got.received_tokens)  # drained: exact over the whole window
        got.counters_restarted = window.restarted
    reason = ended[0] if ended else (Stop.SAMPLE_BUDGET, "no stream left")
    return got.now(*reason).with_overlaps()


def stream_samplers(sampler: Sampler, n: int) -> list[Sampler]:
    """``n`` samplers like ``sampler``, each with a connection of its own, none scraping
    counters per request (other streams move them)."""
    return [Sampler(sampler.endpoint.clone(), sampler.backend, sampler.model, sampler.max_accept,
                    counters_per_request=False) for _ in range(n)]
