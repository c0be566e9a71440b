"""Other requests' prefill in a request's rounds: overlap, roofline term, efficiency, verdict."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from pytest_specbound.gate.judging.judge import Judging, judge
from pytest_specbound.gate.judging.rule import decisions
from pytest_specbound.gate.schema.class_budget import ClassBudget
from pytest_specbound.measure.measurement import Measurement
from pytest_specbound.measure.overlap import overlaps
from pytest_specbound.measure.prefill import level_roofline
from pytest_specbound.measure.sequential import Metric, per_request
from pytest_specbound.physics.hardware import Hardware, parse_hardware
from pytest_specbound.physics.models import load_model
from pytest_specbound.physics.roofline import Deployment, compute_roofline
from pytest_specbound.physics.speculative import parse_speculation
from pytest_specbound.serving.backends import get_backend
from pytest_specbound.serving.records import RequestRecord
from pytest_specbound.serving.stream_result import StreamResult


def rec(sent: float, ttft: float, decode: float, prompt: int = 100, cached: int | None = 0,
        tokens: int = 31, accept: float | None = 3.0) -> RequestRecord:
    return RequestRecord(prompt_tokens=prompt, cached_prompt_tokens=cached,
                         completion_tokens=tokens, ttft_s=ttft, decode_s=decode,
                         chunk_times_s=(ttft, ttft + decode), sent_s=sent,
                         accept_length=accept, accept_source="server" if accept else "none")


def cpu_host(verify_tflops: float, prefill_tflops: float) -> Hardware:
    """This host's CPU as a llama-server budget sees it: its kernels measured at both shapes."""
    return Hardware("cpu", "cpu", 1, 30.0, 0.0, 1.0, "none", 0.0, "probe",
                    kernel_tflops=verify_tflops, prefill_kernel_tflops=prefill_tflops,
                    cores=2)


def test_others_prompts_are_counted_where_they_overlap_a_decode():
    # A decodes over [1, 3]; B's 200-token prompt is computed over [1.5, 2.0], inside A's decode;
    # C's 100-token prompt over [2.5, 3.5] is half inside; A's own prompt ([0, 1]) is not counted
    a, b, c = rec(0.0, 1.0, 2.0), rec(1.5, 0.5, 2.0, prompt=200), rec(2.5, 1.0, 1.0)
    oa, ob, oc = overlaps([a, b, c])
    assert oa.prefill_tokens == pytest.approx(200 + 50)
    assert ob.prefill_tokens == pytest.approx(100)  # B decodes over [2, 4]: all of C's in it
    assert oc.prefill_tokens == 0.0  # C decodes over [3.5, 4.5], after every other prompt
    m = Measurement("llamacpp", (a, b, c)).with_overlaps()
    assert [r.others_prefill_tokens for r in m.records] == [250.0, 100.0, 0.0]


def test_only_the_prompt_tokens_the_server_computed_count():
    """A prompt served from the server's cache costs nothing; a server that does not say how
    many it computed adds no prefill (counting the whole prompt could overstate the floor)."""
    a = rec(0.0, 1.0, 2.0)
    cached = rec(1.5, 0.5, 2.0, prompt=200, cached=150)
    unknown = rec(1.6, 0.4, 2.0, prompt=300, cached=None)
    assert overlaps([a, cached, unknown])[0].prefill_tokens == pytest.approx(50)


def test_the_roofline_adds_prefill_only_beyond_the_compute_a_round_leaves_idle():
    host = parse_hardware("h100")
    model = load_model("llama-3.1-8b")
    roof = compute_roofline(host, model, parse_speculation("eagle:3"), deployment=Deployment(batch=4))
    per_token = 2 * model.active_params / (host.bf16_tflops * 1e12) * 1e3
    assert roof.prefill_ms_per_token == pytest.approx(per_token)
    assert roof.compute_slack_ms > 0  # a memory-bound decode round: most compute idle
    rounds = 10.0
    hidden = rounds * roof.compute_slack_ms / per_token  # prompt tokens the slack absorbs
    assert roof.prefill_ms(0.9 * hidden, rounds) == 0.0
    assert roof.prefill_ms(hidden + 1000, rounds) == pytest.approx(1000 * per_token)
    # a compute-bound round (the CPU demo's) has no slack: every prompt token adds its matmuls
    cpu = compute_roofline(cpu_host(0.01, 0.05), model, parse_speculation("draft:3"),
                           load_model("llama-3.2-1b"), Deployment(batch=4))
    assert cpu.bound == "compute" and cpu.compute_slack_ms == 0.0
    assert cpu.prefill_ms(100, 5) == pytest.approx(100 * 2 * model.active_params / 0.05e12 * 1e3)


def test_a_cpu_without_the_servers_prefill_kernels_counts_no_prefill():
    """The matmul probe is no ceiling for a server's own prompt kernels: nothing is counted."""
    host = replace(cpu_host(0.0, 0.0), bf16_tflops=0.5)
    roof = compute_roofline(host, load_model("llama-3.2-1b"), parse_speculation("ngram:3"),
                            deployment=Deployment(batch=4))
    assert roof.prefill_ms_per_token == 0.0 and roof.prefill_ms(1e6, 1) == 0.0


def level(prompt: int) -> tuple[Measurement, ClassBudget, object]:
    """Two streams, each decoding while the other's prompt of ``prompt`` tokens is computed."""
    roof = compute_roofline(cpu_host(0.02, 0.05), load_model("llama-3.2-1b"),
                            parse_speculation("ngram:3"), deployment=Deployment(batch=2))
    round_s = roof.round_ms / 1e3
    decode = 10 * round_s * 1.5  # 10 rounds of 3 tokens each, at 2/3 of the roofline
    a = rec(0.0, 0.2, decode, prompt=prompt)
    b = rec(0.2 + decode / 4, decode / 4, decode, prompt=prompt)  # its prefill inside A's decode
    m = Measurement("llamacpp", (a, b), concurrency=2)
    return m, ClassBudget("chat", "chat", 30, limits={"min_efficiency": 0.5}), roof


def test_efficiency_counts_the_others_prefill_in_the_floor():
    m, cls, roof = level(prompt=400)
    plain, _, _ = level(prompt=0)
    with_prefill = per_request(m, Metric.EFFICIENCY, roof)
    without = per_request(plain, Metric.EFFICIENCY, roof)
    assert without == pytest.approx([2 / 3, 2 / 3])
    extra_s = roof.prefill_ms(400, 10) / 1e3
    assert with_prefill[0] == pytest.approx(2 / 3 + extra_s / m.records[0].decode_s)
    assert with_prefill[1] == pytest.approx(2 / 3)  # A's prompt came before B's decode
    lr = level_roofline(m, roof)
    assert lr.components_ms["prefill"] == pytest.approx(roof.prefill_ms(400, 10) / 20)
    assert level_roofline(plain, roof) is roof
    verdict = judge(cls, m, roof)
    assert verdict.roofline_tok_s == pytest.approx(lr.tok_s(3.0))
    assert verdict.efficiency == pytest.approx(m.decode_tok_s / lr.tok_s(3.0))
    assert verdict.efficiency > judge(cls, plain, roof).efficiency
    assert set(decisions(cls, m, roof, 0.95, 0.05)) == {"efficiency"}
    json.dumps(lr.to_dict())


def test_llama_server_timings_say_how_much_of_the_prompt_was_cached():
    backend = get_backend("llamacpp")
    events = [(0.1, {"content": "a", "tokens": [1]}), (0.2, {"content": "b", "tokens": [2]}),
              (0.3, {"content": "", "stop": True,
                     "timings": {"prompt_n": 40, "cache_n": 60, "predicted_n": 2,
                                 "predicted_ms": 100.0}})]
    r = backend.parse(StreamResult(0.0, events, True))
    assert (r.prompt_tokens, r.cached_prompt_tokens, r.computed_prompt_tokens) == (100, 60, 40)


def test_an_openai_usage_with_cached_tokens_is_read():
    backend = get_backend("vllm")
    events = [(0.1, {"choices": [{"text": "a", "token_ids": [1]}]}),
              (0.2, {"choices": [{"text": "b", "token_ids": [2]}]}),
              (0.3, {"choices": [], "usage": {"prompt_tokens": 90, "completion_tokens": 2,
                                              "prompt_tokens_details": {"cached_tokens": 64}}})]
    r = backend.parse(StreamResult(0.0, events, True))
    assert (r.prompt_tokens, r.cached_prompt_tokens, r.computed_prompt_tokens) == (90, 64, 26)


def test_the_summary_prints_the_physics_once_and_each_class_measured_prefill():
    from pytest_specbound.gate.schema.settings import resolve
    from pytest_specbound.gate.verdicts.result import ClassResult
    from pytest_specbound.report.outputs import Outputs

    comps = {"weights": 6.0, "kv_cache": 2.0, "compute": 13.0, "overhead": 0.5}
    out = Outputs(resolve({}, {}, lambda name: None), lambda: None)
    for name, prefill in (("coding", 2.5), ("chat", 4.0), ("long", 0.0)):
        roof = {"round_ms": 21.5 + prefill, "batch": 4, "max_accept": 4,
                "components_ms": {**comps, **({"prefill": prefill} if prefill else {})}}
        out.results.append(ClassResult.from_json({
            "budget": "b.toml", "class": name, "hardware": "cpu", "model": "m",
            "roofline": roof, "concurrency": 4}))
    (line,) = [x for x in out.summary_lines() if x.startswith("roofline m")]
    assert line.startswith("roofline m (b.toml) on cpu at batch 4: 21.5 ms per round = ")
    assert "prefill" not in line.split(", bound")[0]
    assert line.endswith("plus other requests' prefill per round, measured: coding 2.5, "
                         "chat 4.0 ms")


def test_a_level_says_when_no_server_field_tells_the_prompt_tokens_computed():
    a, b = rec(0.0, 1.0, 2.0), rec(1.5, 0.5, 2.0, prompt=200)
    assert Measurement("llamacpp", (a, b)).others_prefill_tokens == pytest.approx(100)
    silent = [replace(r, cached_prompt_tokens=None) for r in (a, b)]
    assert Measurement("vllm", tuple(silent)).others_prefill_tokens is None


def test_a_failing_level_names_the_flag_that_would_count_the_others_prefill():
    m, _, roof = level(prompt=400)
    strict = ClassBudget("chat", "chat", 30, limits={"min_efficiency": 0.95})
    silent = replace(m, records=tuple(replace(r, cached_prompt_tokens=None) for r in m.records))
    text = judge(strict, silent, roof, how=Judging(cached_tokens="--enable-prompt-tokens-details")).text
    assert ("note: other requests' prefill is not in this floor: the server does not say how "
            "much of each prompt it computed (launch it with --enable-prompt-tokens-details)"
            in text)
    assert "prefill is not in this floor" not in judge(strict, m, roof).text  # it was counted
