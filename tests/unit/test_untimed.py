"""A request the client cannot time is never dropped silently (server clock, retry, or ERROR)."""

from __future__ import annotations

import re
from dataclasses import replace

import pytest

from pytest_specbound.measure.measurement import Stop
from pytest_specbound.measure.prompts import load_prompts
from pytest_specbound.measure.sampler import FixedCount, Sampler, Stopping, Workload, measure, untimed_reason
from pytest_specbound.serving.backends import get_backend
from pytest_specbound.serving.records import RequestRecord
from pytest_specbound.serving.transport import Endpoint
from tests.servers.fake import FakeServer, Script


def test_tokens_in_too_few_reads_are_untimed():
    rec = RequestRecord(completion_tokens=41, ttft_s=0.01, chunk_times_s=[0.01] * 11,
                        chunk_tokens=[1] + [4] * 10, chunk_reads=[3] * 11)
    assert "40 decode tokens arrived in 0 socket reads" in untimed_reason(rec, 4)
    rec = replace(rec, chunk_reads=(3, *range(4, 14)))  # one verify step per read: fine
    assert untimed_reason(rec, 4) is None
    rec = replace(rec, chunk_reads=(3, *[4, 5] * 5))  # 40 tokens in 2 reads: over 4 per step
    assert "in 2 socket reads" in untimed_reason(rec, 4)


def test_ttft_under_the_loopback_floor_is_untimed():
    rec = RequestRecord(completion_tokens=3, ttft_s=5e-6, chunk_reads=[1, 2, 3],
                        chunk_tokens=[1, 1, 1], chunk_times_s=[5e-6, 0.01, 0.02])
    assert "under the loopback floor" in untimed_reason(rec, 4)


def test_a_server_that_bursts_gets_its_own_clock_used_and_named():
    with FakeServer("llamacpp", Script(burst=True)) as srv:  # llama.cpp reports timings
        m = measure(Sampler(Endpoint(srv.url), get_backend("llamacpp"), max_accept=4),
                    Workload(load_prompts("chat"), 41, warmup=0), Stopping(FixedCount(4)))
    assert len(m.records) == 4 and not m.untimed
    assert all(r.clock == "server" and r.decode_s == r.server_decode_s > 0 for r in m.records)
    assert "4 of 4 requests timed on the server's clock" in m.server_clock_note()
    assert m.ttft_ms().median is None  # the client's TTFT of such requests is not trusted


def test_untimeable_requests_are_retried_then_the_class_is_an_error():
    from pytest_specbound.gate.judging.judge import judge
    from pytest_specbound.gate.schema.class_budget import ClassBudget
    from pytest_specbound.physics.hardware import parse_hardware
    from pytest_specbound.physics.models import load_model
    from pytest_specbound.physics.roofline import compute_roofline
    from pytest_specbound.physics.speculative import parse_speculation

    with FakeServer("vllm", Script(burst=True, fault="nometrics")) as srv:  # no clock at all
        m = measure(Sampler(Endpoint(srv.url), get_backend("vllm"), max_accept=4),
                    Workload(load_prompts("chat"), 41, warmup=0),
                    Stopping(FixedCount(4), max_untimed=3))
    assert m.stop is Stop.UNTIMED and len(m.untimed) == 4 and not m.records
    roof = compute_roofline(parse_hardware("h100"), load_model("llama-3.1-8b"),
                            parse_speculation("eagle3:3"))
    verdict = judge(ClassBudget("chat", "chat", 41, limits={"accept": (3.5, 4.0)}), m, roof)
    assert verdict.status == "error" and verdict.reasons == ("untimed",)
    # a burst reads as all 40 tokens in the first read, whichever clock stamped the reads
    assert re.match(r"4 of 4 requests could not be timed \(more than the allowance of 3\): "
                    r"(40 of 40 decode tokens arrived in the first token's socket read"
                    r"|40 decode tokens arrived in 0 socket reads)", verdict.lines[0]), \
        verdict.lines[0]


@pytest.mark.parametrize("family", ["vllm", "llamacpp", "sglang"])
def test_a_steady_server_is_timed_by_the_client(family):
    # 50 ms between verify steps: a step could only share a socket read with the next one if the
    # client were kept off the CPU for longer than that
    with FakeServer(family, Script(step_s=0.05)) as srv:
        m = measure(Sampler(Endpoint(srv.url), get_backend(family), max_accept=4),
                    Workload(load_prompts("chat"), 41, warmup=0), Stopping(FixedCount(3)))
    assert not m.untimed and all(r.clock == "client" and r.decode_reads >= 10 for r in m.records)


@pytest.mark.parametrize("per_request", [True, False])
def test_vllm_server_clock_on_every_request(per_request):
    """vLLM's clock comes from its decode-time histogram: scraped around every request, also when
    the per-request metrics already give the accept length."""
    with FakeServer("vllm", Script(per_request_metrics=per_request)) as srv:
        m = measure(Sampler(Endpoint(srv.url), get_backend("vllm"), max_accept=4),
                    Workload(load_prompts("chat"), 41, warmup=1), Stopping(FixedCount(4)))
    assert all(r.server_decode_s and r.server_decode_s > 0 for r in m.records)
    assert m.accept_source == ("server" if per_request else "metrics")
    assert abs(m.clock_ratio - 1) < 0.2


@pytest.mark.parametrize(("drafting", "source"), [(True, "server"), (None, "metrics")])
def test_a_request_llama_server_drafted_nothing_for_is_accept_one(drafting, source):
    """llama-server leaves draft_n out of a request it drafted nothing for (an n-gram drafter
    with no match): on a server known to speculate that is its word for one token a step;
    without that knowledge the figure comes from elsewhere (here the counters)."""
    with FakeServer("llamacpp", Script(steps=[1] * 12, drafted=False)) as srv:
        m = measure(Sampler(Endpoint(srv.url), get_backend("llamacpp"), max_accept=4,
                            drafting=drafting), Workload(load_prompts("chat"), 13, warmup=0),
                    Stopping(FixedCount(3)))
    assert [r.accept_source for r in m.records] == [source] * 3
    assert all(r.accept_length == pytest.approx(1.0, abs=0.35) for r in m.records)
    if drafting:
        assert all(r.accept_length == 1.0 for r in m.records)
