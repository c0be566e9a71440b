"""Every backend against its protocol-faithful test server, on known answers."""

import pytest

from pytest_specbound.measure.sampler import FixedCount, Sampler, Stopping, Workload, measure
from pytest_specbound.serving.backends import get_backend
from pytest_specbound.serving.backends.base import Prompt
from pytest_specbound.serving.backends.detect import identify
from pytest_specbound.serving.transport import Endpoint
from tests.servers.fake import FakeServer, Script

SERVER_ACCEPT = ["sglang", "vllm", "llamacpp", "trtllm"]
PROMPTS = [Prompt(text="count to ten"), Prompt(messages=({"role": "user", "content": "hi"},))]


def run(family, script=None, backend=None, samples=3, prompts=PROMPTS, model=None):
    with FakeServer(family, script) as srv:
        sampler = Sampler(Endpoint(srv.url), get_backend(backend or family), model)
        m = measure(sampler, Workload(prompts, 41, warmup=1), Stopping(FixedCount(samples)))
        return m, srv


@pytest.mark.parametrize("family", SERVER_ACCEPT)
def test_ten_steps_of_four_is_accept_four_from_the_server(family):
    m, _ = run(family)
    assert not m.failures, [r.error for r in m.failures]
    assert m.accept_length == pytest.approx(4.0)
    assert m.accept_source == "server"
    assert all(r.completion_tokens == 41 for r in m.records)


def test_tgi_accept_from_skipped_tokens_histogram():
    m, _ = run("tgi")
    assert m.accept_length == pytest.approx(4.0) and m.accept_source == "metrics"


def test_vllm_without_per_request_metrics_falls_back_to_prometheus():
    m, _ = run("vllm", Script(per_request_metrics=False))
    assert m.accept_length == pytest.approx(4.0) and m.accept_source == "metrics"


def test_no_accept_statistics_falls_back_to_flagged_estimate():
    m, _ = run("vllm", Script(per_request_metrics=False, fault="nometrics"))
    assert m.accept_source == "estimate"
    assert m.accept_length == pytest.approx(4.0, rel=0.05)


def test_a_server_without_speculation_gets_no_estimate_from_its_bursts():
    """The twin (no drafting: one token a verify step) streaming in bursts: no accept length
    made up from them (a real llama-server's network reads gave 1.4-1.6 a request)."""
    def sampled(max_accept: int):
        with FakeServer("llamacpp", Script(drafted=False, fault="nometrics")) as srv:
            sampler = Sampler(Endpoint(srv.url), get_backend("llamacpp"), None,
                              max_accept=max_accept)
            return measure(sampler, Workload(PROMPTS, 41, warmup=1), Stopping(FixedCount(3)))

    drafting = sampled(8)  # the same stream from a server that may draft: estimated, flagged
    assert drafting.accept_source == "estimate", drafting.accept_source
    m = sampled(1)
    assert not m.failures, [r.error for r in m.failures]
    assert m.accept_length is None and m.accept_source == "none"
    assert all(r.accept_length is None for r in m.records)


def test_generic_openai_estimates_from_chunks():
    m, _ = run("vllm", backend="openai")
    assert m.accept_source == "estimate" and m.accept_length == pytest.approx(4.0)


def test_llamacpp_bursts_estimate_when_only_arrival_gaps_show_steps():
    from pytest_specbound.serving.backends.base import burst_accept

    times, t = [0.0], 0.0
    for _ in range(10):
        t += 0.004
        times += [t, t + 1e-5, t + 2e-5, t + 3e-5]
    assert burst_accept(times, len(times) - 1, chunks_are_steps=False) == pytest.approx(4.0)


@pytest.mark.parametrize("steps", [[1] * 12, [2, 3, 4, 1, 4, 2], [4] * 3 + [1] * 3])
@pytest.mark.parametrize("family", SERVER_ACCEPT)
def test_uneven_steps(family, steps):
    m, _ = run(family, Script(steps=steps), samples=2)
    assert m.accept_length == pytest.approx(sum(steps) / len(steps))


def test_sglang_native_cumulative_text_counts_tokens_per_chunk():
    m, _ = run("sglang", Script(steps=[3, 2, 4]), prompts=[Prompt(text="x")], samples=1)
    assert m.records[0].chunk_tokens == (1, 3, 2, 4)


def test_vllm_request_is_deterministic_and_counts_ids():
    m, srv = run("vllm", prompts=[Prompt(text="x")], samples=1)
    body = srv.requests[-1]["body"]
    assert body["temperature"] == 0.0 and body["ignore_eos"] and body["min_tokens"] == 41
    assert body["return_token_ids"] and body["stream_options"]["include_usage"]
    assert m.records[0].chunk_tokens == (1,) + (4,) * 10


def test_trtllm_gets_no_unknown_fields():
    _, srv = run("trtllm", prompts=[Prompt(text="x")], samples=1)
    assert "return_token_ids" not in srv.requests[-1]["body"]


def test_decode_rate_and_ttft_follow_the_schedule():
    m, _ = run("llamacpp", Script(steps=[4] * 20, step_s=0.01, ttft_s=0.05), samples=2)
    # 80 tokens in 20 steps of at least 10 ms: at most 400 tok/s. Sleep overshoots by however
    # busy the machine is, so the truth is the server's own clock, not the schedule.
    assert m.decode_tok_s < 410
    assert m.server_decode_tok_s == pytest.approx(m.decode_tok_s, rel=0.1)
    assert m.ttft_ms().median >= 50  # the scripted prefill sleep is a lower bound


@pytest.mark.parametrize("family", ["sglang", "vllm", "llamacpp", "trtllm", "tgi"])
def test_auto_identifies_family(family):
    with FakeServer(family) as srv:
        assert identify(Endpoint(srv.url)) == family


def test_server_info_records_version():
    with FakeServer("sglang") as srv:
        info = get_backend("sglang").info(Endpoint(srv.url))
    assert info.version == "0.5.23" and info.speculative["speculative_num_steps"] == 3


def test_a_first_read_that_merged_decode_tokens_does_not_shorten_the_decode():
    from pytest_specbound.serving.backends.base import decode_seconds

    # 1 + 12 tokens at 100 tok/s from t = 0.10; the reader ran late and got the first token with
    # the next 3 in one read, stamped with the newest (0.13), then one token per read
    times = [0.13, 0.13, 0.13, 0.13, *[0.10 + 0.01 * k for k in range(4, 13)]]
    tokens = [1] * 13
    reads = [1, 1, 1, 1, *range(2, 11)]
    assert 12 / decode_seconds(times, tokens, reads, 12) == pytest.approx(100.0)
    # an on-time reader: first token alone in its read, the plain span
    assert decode_seconds([0.1, 0.2, 0.3], [1, 2, 2], [1, 2, 3], 4) == pytest.approx(0.2)


@pytest.mark.parametrize(("backend", "prompt", "where"), [
    ("vllm", "text", lambda b: b), ("sglang", "text", lambda b: b["sampling_params"]),
    ("llamacpp", "text", lambda b: b), ("trtllm", "text", lambda b: b),
    ("tgi", "text", lambda b: b["parameters"]), ("openai", "chat", lambda b: b)])
def test_sampling_goes_in_each_servers_own_fields(backend, prompt, where):
    from pytest_specbound.serving.backends import get_backend
    from pytest_specbound.serving.backends.base import Prompt, Sampling

    p = Prompt(text="x") if prompt == "text" else Prompt(messages=({"role": "user", "content": "x"},))
    b = get_backend(backend)
    _, greedy = b.build_request(p, 8, None)
    if backend == "tgi":
        assert where(greedy)["do_sample"] is False and "temperature" not in where(greedy)
    else:
        assert where(greedy)["temperature"] == 0.0 and "top_p" not in where(greedy)
    _, body = b.build_request(p, 8, None, Sampling(0.7, top_p=0.9, top_k=20))
    fields = where(body)
    assert (fields["temperature"], fields["top_p"], fields["top_k"]) == (0.7, 0.9, 20)
    if backend == "tgi":
        assert fields["do_sample"] is True


@pytest.mark.parametrize(("backend", "field"), [("trtllm", "min_p"), ("sglang", "seed"),
                                                ("tgi", "min_p")])
def test_a_sampling_field_a_server_does_not_take_is_named(backend, field):
    from pytest_specbound.serving.backends import get_backend
    from pytest_specbound.serving.backends.base import Prompt, Sampling, SamplingError

    with pytest.raises(SamplingError, match=rf"^{field} is not a {backend} request field; valid: "):
        get_backend(backend).build_request(Prompt(text="x"), 8, None,
                                           Sampling(0.7, **{field: 1 if field == "seed" else 0.1}))


def test_a_last_round_cut_by_max_tokens_still_counts_as_a_forward():
    """vLLM counts a round's accepted drafts before max_tokens cuts the response: a real
    request (K=9) streamed 63 decode tokens with 56 drafts accepted over 8 drafting rounds.
    Decode tokens minus accepted drafts says 7 forwards; there were at least the 8 rounds."""
    from pytest_specbound.serving.backends.vllm import VLLM
    from pytest_specbound.serving.records import RequestRecord

    hist = [0, 1, 0, 1, 0, 0, 0, 0, 0, 6]
    spec = {"acceptance_histogram": hist, "num_spec_steps": 8, "num_accepted_draft_tokens": 56,
            "num_draft_tokens": 72, "num_spec_tokens": 9}
    record = RequestRecord(completion_tokens=64)
    got = VLLM().server_fields([(0.0, {"metrics": {"speculative_decoding": spec}})], record)
    assert got.accept_length == pytest.approx(63 / 8) and got.accept_source == "server"
    # where the server counts no rounds (an older vLLM) the count stands as it was
    del spec["num_spec_steps"]
    old = VLLM().server_fields([(0.0, {"metrics": {"speculative_decoding": spec}})], record)
    assert old.accept_length == pytest.approx(63 / 7)
    # the Prometheus deltas over whole requests: at least one forward per counted draft
    from pytest_specbound.serving.backends.vllm import ACCEPTED, DRAFTS, GENERATED

    delta = {GENERATED: 64.0, ACCEPTED: 56.0, DRAFTS: 8.0}
    assert VLLM().accept_from_deltas(delta) == pytest.approx(63 / 8)
