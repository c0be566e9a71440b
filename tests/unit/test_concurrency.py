"""Closed-loop load, overlaps and the per-level figures, against the protocol-faithful fakes."""

from __future__ import annotations

import _thread
import json
import signal
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from pytest_specbound.advisers.calibrate import apply
from pytest_specbound.errors import ConfigError
from pytest_specbound.gate.judging.judge import Judging, judge
from pytest_specbound.gate.schema.budget import load_budget
from pytest_specbound.gate.schema.class_budget import ClassBudget
from pytest_specbound.gate.schema.settings import resolve
from pytest_specbound.gate.verdicts.result import ClassResult
from pytest_specbound.gate.verdicts.verdict import batching_hint
from pytest_specbound.measure.load import CounterWindow, measure_closed_loop, stream_samplers
from pytest_specbound.measure.measurement import Measurement, Stop
from pytest_specbound.measure.overlap import overlaps
from pytest_specbound.measure.prompts import load_prompts
from pytest_specbound.measure.sampler import FixedCount, Sampler, Stopping, Workload
from pytest_specbound.measure.stats import bounds
from pytest_specbound.physics.hardware import parse_hardware
from pytest_specbound.physics.models import load_model
from pytest_specbound.physics.roofline import Deployment, compute_roofline
from pytest_specbound.physics.speculative import parse_speculation
from pytest_specbound.report.table import terminal
from pytest_specbound.serving.backends import get_backend
from pytest_specbound.serving.records import RequestRecord
from pytest_specbound.serving.transport import Endpoint
from tests.servers.fake import FakeServer, Script


def rec(sent: float, ttft: float, decode: float, tokens: int = 11) -> RequestRecord:
    return RequestRecord(completion_tokens=tokens, ttft_s=ttft, decode_s=decode,
                         chunk_times_s=(ttft, ttft + decode), sent_s=sent)


def test_overlaps_integrate_the_step_functions_exactly():
    # A decodes over [1, 3]; B is in flight over [0, 4] and decodes over [2, 4]; C is alone later
    a, b, c = rec(0.5, 0.5, 2.0), rec(0.0, 2.0, 2.0), rec(10.0, 0.5, 1.0)
    oa, ob, oc = overlaps([a, b, c])
    assert oa.in_flight == pytest.approx(2.0)  # B's span covers all of A's decode
    assert oa.co_decoding == pytest.approx(1.5)  # alone on [1, 2], with B on [2, 3]
    assert oa.share_s == pytest.approx(1.0 + 0.5)
    assert ob.co_decoding == pytest.approx(1.5) and ob.share_s == pytest.approx(0.5 + 1.0)
    assert (oc.in_flight, oc.co_decoding, oc.share_s) == (1.0, 1.0, 1.0)
    # the shares add up to the wall time in which something decoded: [1, 4] and [10.5, 11.5]
    assert oa.share_s + ob.share_s + oc.share_s == pytest.approx(4.0)


def test_a_request_timed_on_the_servers_clock_keeps_its_decode_time_in_the_aggregate():
    """Its tokens reached the client in one burst (client interval ~0): its window lasts the
    server's decode time and ends at the burst, so one request at a time still aggregates to
    its own rate (it read 20x the rate on real vLLM before)."""
    from dataclasses import replace

    burst = replace(rec(0.0, 0.30, 0.25, tokens=64), chunk_times_s=(0.30, 0.3001),
                    clock="server")
    assert burst.decode_window == pytest.approx((0.0501, 0.3001))
    m = Measurement("vllm", (rec(1.0, 0.05, 0.25, tokens=64), burst))
    assert m.aggregate_tok_s == pytest.approx(m.decode_tok_s, rel=1e-6)


def test_a_late_first_read_keeps_the_extrapolated_decode_time_in_the_aggregate():
    """The first token's read also brought decode tokens: decode_s is extrapolated past the
    first-to-last interval, and the overlap window must last as long (the aggregate read 6%
    above the per-user rate at one stream on real vLLM when it did not)."""
    from dataclasses import replace

    late = replace(rec(2.0, 0.05, 0.30, tokens=64), chunk_times_s=(0.05, 0.05, 0.32))
    assert late.decode_window == pytest.approx((2.02, 2.32))  # 0.30 s ending at the last token
    m = Measurement("vllm", (rec(1.0, 0.05, 0.25, tokens=64), late))
    assert m.aggregate_tok_s == pytest.approx(m.decode_tok_s, rel=1e-6)


def test_records_without_a_send_time_have_no_overlap():
    assert overlaps([RequestRecord(completion_tokens=5, decode_s=1.0)]) == [None]


def closed_loop(fake: FakeServer, n: int, count: int = 12, window: bool = True, **kw):
    backend = get_backend(fake.family)
    endpoint = Endpoint(fake.url)
    base = Sampler(endpoint, backend, "test-model")
    return measure_closed_loop(stream_samplers(base, n), Workload(load_prompts("chat"), 41, warmup=1),
                               Stopping(FixedCount(count)),
                               window=CounterWindow(backend, endpoint) if window else None, **kw)


def test_n_streams_keep_n_requests_in_flight():
    # 40 ms steps: decodes long against a busy machine's scheduling delays, so the overlap
    # figures measure the closed loop, not the load around the test
    with FakeServer("llamacpp", Script(step_s=0.04)) as fake:
        m = closed_loop(fake, 4)
    assert fake.max_in_flight == 4 and len(m.records) == 12 and not m.failures
    assert m.concurrency == 4 and all(r.concurrency == 4 for r in m.records)
    assert len(m.drained) <= 3  # in flight when the rule stopped: kept, not counted
    assert m.in_flight > 3.0 and m.co_decoding > 3.0, (m.in_flight, m.co_decoding)
    assert all(r.in_flight and r.co_decoding for r in m.records)  # per record, in the JSON
    assert m.accept_source == "server" and m.accept_length == pytest.approx(4.0)
    # a server that batches perfectly (the fake sleeps per request): aggregate ~ N x per user
    assert m.aggregate_tok_s / m.decode_tok_s == pytest.approx(m.co_decoding, rel=0.15)
    agg = bounds(m, 10.0, 0.95)["aggregate_tok_s"]
    assert agg[0] < m.aggregate_tok_s < agg[1]


def test_a_single_slot_server_is_diagnosed_as_not_batching():
    roof = compute_roofline(parse_hardware("h100-sxm"), load_model("llama-3.1-8b"),
                            parse_speculation("eagle3:3"), deployment=Deployment(batch=4))
    with FakeServer("llamacpp", Script(step_s=0.005, slots=1)) as fake:
        m = closed_loop(fake, 4, count=8)
    assert fake.max_in_flight == 1 and m.co_decoding < 1.3, m.co_decoding
    cls = ClassBudget("chat", "chat", 41, limits={"min_efficiency": 0.01})
    hint = batching_hint("llamacpp", "-np / --parallel (slots)", 4, 1, "/props total_slots 1")
    v = judge(cls, m, roof, how=Judging(batching=hint))
    assert v.status == "fail" and "not_batching" in v.reasons and v.diagnosis == "system"
    assert "the server did not batch: 4 requests in flight, 1.0 decoded at once" in v.text
    assert "llamacpp caps concurrent sequences with -np / --parallel (slots): set it to at " \
           "least 4 (it serves 1 at once: /props total_slots 1)" in v.text
    # at a look during sampling the in-flight requests are not in the overlaps yet: no verdict
    assert "not_batching" not in judge(cls, m, roof, final=False).reasons


@pytest.mark.parametrize("family", ["vllm", "tgi"])  # the fakes with counters only
def test_counters_only_servers_give_the_window_accept(family):
    # the fakes script 10 verify steps of 4 tokens: every counter definition gives exactly 4
    with FakeServer(family, Script(per_request_metrics=False, step_s=0.002)) as fake:
        m = closed_loop(fake, 3, count=9)
    assert m.accept_source == "window", [r.accept_source for r in m.records]
    assert m.window_accept == pytest.approx(4.0, abs=0.05)
    assert all(r.accept_length is None for r in m.records)  # no per-request figure was made up
    b = bounds(m, 10.0, 0.95, max_accept=4)
    assert b["accept_length"] == (m.window_accept, m.window_accept)
    lo, hi = b["decode_tok_s"]
    assert b["efficiency"] == pytest.approx((lo * 0.01 / m.window_accept,
                                             hi * 0.01 / m.window_accept))


def test_a_server_restarted_inside_the_window_gives_no_counter_accept():
    """A supervisor restarted the server: its counters start again from zero. A delta across
    the restart would be a number silently wrong (negative, or only the tail's)."""
    with FakeServer("vllm", Script(per_request_metrics=False, step_s=0.002)) as fake:
        seen = [0]

        def restart_after_three(m: Measurement) -> None:
            seen[0] += 1
            if seen[0] == 3:
                with fake.counters.lock:
                    fake.counters.values.clear()

        m = closed_loop(fake, 2, count=9, on_record=restart_after_three)
    assert m.counters_restarted and m.window_accept is None and m.accept_source == "none"
    assert "(a restart, or /metrics answered by another replica" in (m.restart_note() or "")
    roof = compute_roofline(parse_hardware("h100-sxm"), load_model("llama-3.1-8b"),
                            parse_speculation("eagle3:3"), deployment=Deployment(batch=2))
    v = judge(ClassBudget("chat", "chat", 41, limits={"min_efficiency": 0.01}), m, roof)
    assert v.status == "error" and v.reasons == ("no_accept", "server_restarted")
    assert v.text.startswith("no accept length: the server's counters went down"), v.text


def test_counter_deltas_never_span_a_restart():
    from pytest_specbound.serving.prometheus import counter_delta

    assert counter_delta({"a": 5.0, "b": 1.0}, {"a": 7.0, "b": 1.0, "c": 2.0}) == \
        {"a": 2.0, "b": 0.0, "c": 2.0}
    assert counter_delta({"a": 5.0, "b": 1.0}, {"a": 7.0, "b": 0.0}) is None


@pytest.fixture
def sigint_raises() -> Iterator[None]:
    """Python's own SIGINT handler for the test. A process started as a shell's background job
    (CI steps, `cmd &`) inherits SIGINT ignored and Python keeps it so: then Ctrl-C, and
    ``_thread.interrupt_main``, do nothing at all."""
    old = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, old)


def test_ctrl_c_during_a_level_hands_over_what_was_measured(sigint_raises):
    seen: list[Measurement] = []
    timer = threading.Timer(0.05, _thread.interrupt_main)

    def record(m: Measurement) -> None:  # Ctrl-C once requests were counted, however busy
        seen.append(m)                   # the machine is
        if len(seen) == 2:
            timer.start()

    # 40 requests of about 0.1 s over two streams: a lost interrupt costs seconds, not minutes
    with FakeServer("llamacpp", Script(step_s=0.01)) as fake:
        with pytest.raises(KeyboardInterrupt):
            closed_loop(fake, 2, count=40, on_record=record)
        timer.cancel()
    assert seen[-1].interrupted and seen[-1].stop is Stop.INTERRUPTED
    assert seen[-1].records and all(r.in_flight for r in seen[-1].records)
    assert len(seen[-1].records) < 40, "the interrupt was not seen: every request was sent"


def test_failed_requests_are_counted_results():
    with FakeServer("llamacpp", Script(fault="http500")) as fake:
        m = closed_loop(fake, 3, count=6)
    assert len(m.failures) == len(m.records) == 6 and "HTTP 500" in (m.failures[0].error or "")


def write(tmp_path: Path, classes: str, roofline: str = "") -> Path:
    p = tmp_path / "b.toml"
    p.write_text('[model]\nname = "llama-3.1-8b"\n[server]\nurl = "http://127.0.0.1:9"\n'
                 f"{roofline}\n{classes}")
    return p


def test_levels_and_their_tables(tmp_path):
    b = load_budget(write(tmp_path, "[classes.chat]\nmin_efficiency = 0.5\nconcurrency = [1, 8]\n"
                                     "[classes.chat.c8]\nmin_efficiency = 0.3\n"
                                     "max_ttft_ms = 400\n"))
    chat = b.classes["chat"]
    assert chat.concurrency == (1, 8) and chat.level_ids
    assert chat.at(1).limits.get("min_efficiency") == 0.5 and chat.at(1).limits.get("max_ttft_ms") is None
    assert chat.at(8).limits.get("min_efficiency") == 0.3 and chat.at(8).limits.get("max_ttft_ms") == 400


@pytest.mark.parametrize(("classes", "roofline", "needle"), [
    ("[classes.chat]\nconcurrency = 0\n", "",
     r"b\.toml:7: classes\.chat\.concurrency: expected distinct whole numbers in \[1, 1024\]"),
    ("[classes.chat]\nconcurrency = [1, 1]\n", "", r"classes\.chat\.concurrency: .* \(a level is repeated\)"),
    ('[classes.chat]\nconcurrency = "4"\n', "", r"classes\.chat\.concurrency: expected distinct whole"),
    ("[classes.chat]\nconcurrency = [1, 4]\n[classes.chat.c8]\nmin_tok_s = 1\n", "",
     r"b\.toml:8: classes\.chat\.c8: concurrency 8 is not one of the class's levels \[1, 4\]"),
    ("[classes.chat]\nconcurrency = [1, 4]\n[classes.chat.c4]\nprompts = 'x'\n", "",
     r"classes\.chat\.c4\.prompts: unknown key; valid: accept, max_tpot_ms, max_ttft_ms, min_eff"),
    ("[classes.chat]\nconcurrency = [1, 4]\n", "[roofline]\nbatch = 4\n",
     r"roofline\.batch: class 'chat' sets concurrency, which sets the roofline's batch"),
])
def test_bad_levels_are_one_line_errors(tmp_path, classes, roofline, needle):
    with pytest.raises(ConfigError, match=needle):
        load_budget(write(tmp_path, classes, roofline))


def test_the_concurrency_option():
    def settings(value: str):
        return resolve({"specbound_concurrency": value}, {}, lambda name: None)

    assert settings("1,4,16").concurrency == (1, 4, 16)
    for bad in ("0", "1,1", "four", "1,,4"):
        with pytest.raises(ConfigError, match=f"--specbound-concurrency={bad}: expected distinct"):
            settings(bad)
    env = resolve({}, {"SPECBOUND_CONCURRENCY": "2"}, lambda name: None)
    assert env.concurrency == (2,)


def test_calibrate_adds_a_level_table_after_the_class(tmp_path):
    text = ("[classes.chat]\nconcurrency = [1, 4]\nmin_efficiency = 0.5\n\n"
            "[classes.other]\nprompts = 'chat'\n")
    out = apply(text, "classes.chat.c4", {"min_efficiency": 0.31}, after="classes.chat")
    assert out == ("[classes.chat]\nconcurrency = [1, 4]\nmin_efficiency = 0.5\n\n"
                   "[classes.chat.c4]\nmin_efficiency = 0.31\n\n"
                   "[classes.other]\nprompts = 'chat'\n")
    assert apply(out, "classes.chat.c4", {"min_efficiency": 0.2}, after="classes.chat") == \
        out.replace("0.31", "0.20")  # an existing table is edited in place


def test_results_and_table_carry_the_level():
    roof = compute_roofline(parse_hardware("h100-sxm"), load_model("llama-3.1-8b"),
                            parse_speculation("eagle3:3"), deployment=Deployment(batch=4))
    with FakeServer("llamacpp", Script(step_s=0.005)) as fake:
        m = closed_loop(fake, 4, count=8)
    base = ClassResult("b.toml", "chat", "h100-sxm", judge(ClassBudget("chat", "chat", 41), m, roof),
                       concurrency=4, level_ids=True)
    r = base.with_measurement(m)
    back = ClassResult.from_json(json.loads(json.dumps(r.to_json())))
    assert back.to_json() == r.to_json() and back.label == "b.toml::chat[h100-sxm-c4]"
    assert back.aggregate_tok_s and back.co_decoding and len(back.requests) == 8
    table = terminal([back])
    assert "conc" in table and "aggregate" in table and " 4 " in table


class _PromptTimedSampler:
    """A stand-in stream: the first prompt takes 0.3 s, every other 10 ms; each record names
    its prompt (as ``prompt_tokens``, its index) so the test can see which were counted."""

    backend = get_backend("llamacpp")

    def __init__(self, prompts: list[str]) -> None:
        self.prompts = prompts

    def one(self, prompt: str, max_tokens: int) -> RequestRecord:
        import time

        sent = time.perf_counter()
        took = 0.3 if prompt == self.prompts[0] else 0.01
        time.sleep(took)
        return RequestRecord(prompt_tokens=self.prompts.index(prompt), completion_tokens=11,
                             ttft_s=took / 2, decode_s=took / 2, chunk_times_s=(took / 2, took),
                             sent_s=sent)


def test_the_requests_counted_are_the_first_sent_not_the_first_to_finish():
    """Two streams, the first prompt slow: the fast stream finishes four before it does. The
    rule must see the first four *sent* (prompts 0-3), the same prompts however the server's
    speed orders them (a draft length that speeds up some prompts more than others made the
    first four to finish a different mix at each K); the fast ones sent later are drained."""
    prompts = [f"prompt {k}" for k in range(10)]
    samplers = [_PromptTimedSampler(prompts) for _ in range(2)]
    m = measure_closed_loop(samplers, Workload(prompts, 11, warmup=0),  # type: ignore[arg-type]
                            Stopping(FixedCount(4)))
    assert [r.prompt_tokens for r in m.records] == [0, 1, 2, 3]
    sent = [r.sent_s for r in m.records]  # numbered under the lock, stamped after it: the
    assert None not in sent                 # two streams' first sends may stamp either way
    # the fast stream's later requests (prompts 4-9, then round again) were drained, not counted
    assert m.drained and min(r.sent_s or 0.0 for r in m.drained) >= max(sent)  # type: ignore[type-var]


def test_the_time_budget_holds_while_the_rule_waits_on_a_slow_request():
    """The first prompt is slow and the rule counts in send order: the fast stream's requests
    wait behind it, and the time budget ends the level on their arrival, not the slow one's."""
    prompts = [f"prompt {k}" for k in range(10)]
    samplers = [_PromptTimedSampler(prompts) for _ in range(2)]
    m = measure_closed_loop(samplers, Workload(prompts, 11, warmup=0),  # type: ignore[arg-type]
                            Stopping(FixedCount(100), max_seconds=0.05))
    assert m.stop is Stop.TIME_BUDGET and not m.records
    assert {r.prompt_tokens for r in m.drained} >= {0, 1, 2}  # all kept, none counted


def test_a_slow_early_request_does_not_let_the_other_streams_send_without_end():
    """While the rule waits on the slow first request, the fast stream stops at what the level
    may send (4 counted, no untimed retries, one in flight per stream), not 30 more."""
    prompts = [f"prompt {k}" for k in range(10)]
    samplers = [_PromptTimedSampler(prompts) for _ in range(2)]
    m = measure_closed_loop(samplers, Workload(prompts, 11, warmup=0),  # type: ignore[arg-type]
                            Stopping(FixedCount(4), max_untimed=0))
    assert [r.prompt_tokens for r in m.records] == [0, 1, 2, 3]
    assert len(m.records) + len(m.drained) <= 6, len(m.drained)
