"""Pinned acceptance: each family's synthetic-acceptance setting written into the launch (or
its environment), a family without one a one-line error, the budget key checked, and the
measured accept held against the pin."""

from __future__ import annotations

import json
import shlex

import pytest

from pytest_specbound.errors import ConfigError
from pytest_specbound.serving.connect import ServerConfig
from pytest_specbound.serving.pinning import min_variance_rates, pinned

LLAMA = ("llama-server -m t.gguf -md d.gguf --spec-type draft-simple --spec-draft-n-max 3 "
         "--spec-synth-len 3.0 --host {host} --port {port}")
VLLM = ("vllm serve m --speculative-config '{\"method\": \"ngram\", \"num_speculative_tokens\": 3}'"
        " --port {port}")


@pytest.mark.parametrize(("accept", "steps", "rates"), [
    (3.0, 3, [1.0, 1.0, 0.0]), (2.5, 3, [1.0, 0.5, 0.0]), (1.0, 2, [0.0, 0.0]),
    (4.0, 3, [1.0, 1.0, 1.0]), (2.25, 4, [1.0, 0.25, 0.0, 0.0]),
])
def test_the_minimum_variance_schedule_has_the_pinned_mean(accept, steps, rates):
    got = min_variance_rates(accept, steps)
    assert got == pytest.approx(rates)
    # P(at least i+1 drafts accepted) summed is the mean count of accepted drafts
    assert 1 + sum(got) == pytest.approx(accept)


def test_llama_server_gets_synth_rates_and_loses_its_own_synth_setting():
    cfg = pinned(ServerConfig(backend="llamacpp", launch=LLAMA), 2.5, 3, "b.toml:9: pin")
    argv = shlex.split(cfg.launch or "")
    assert "--spec-synth-len" not in argv
    assert argv[argv.index("--spec-synth-rates") + 1] == "1,0.5,0"
    assert "{host}" in argv and "{port}" in argv  # placeholders left for the launcher
    assert cfg.key() != ServerConfig(backend="llamacpp", launch=LLAMA).key()  # its own server


@pytest.mark.parametrize("form", ["space", "equals", "short"])
def test_vllm_gets_the_synthetic_rejection_sampler_in_its_speculative_config(form):
    spec = '{"method": "ngram", "num_speculative_tokens": 3, "synthetic_acceptance_rates": [1, 1, 0]}'
    flag = {"space": f"--speculative-config '{spec}'", "equals": f"--speculative-config='{spec}'",
            "short": f"-sc '{spec}'"}[form]
    cfg = pinned(ServerConfig(backend="auto", launch=f"vllm serve m {flag} --port {{port}}"),
                 3.0, 3, "b.toml:9: pin")
    argv = shlex.split(cfg.launch or "")
    text = next(w.partition("=")[2] if w.startswith("--speculative-config=") else argv[i + 1]
                for i, w in enumerate(argv) if w.startswith(("--speculative-config", "-sc")))
    config = json.loads(text)
    assert config == {"method": "ngram", "num_speculative_tokens": 3,
                      "rejection_sample_method": "synthetic", "synthetic_acceptance_length": 3.0}


def test_sglang_and_tensorrt_llm_are_pinned_by_their_environment():
    sglang = pinned(ServerConfig(backend="sglang", launch="python -m sglang.launch_server --port "
                                 "{port}"), 3.2, 3, "o")
    assert dict(sglang.env) == {"SGLANG_SIMULATE_ACC_LEN": "3.2",
                                "SGLANG_SIMULATE_ACC_METHOD": "match-expected"}
    trt = pinned(ServerConfig(backend="trtllm", launch="trtllm-serve m --port {port}"), 2.78, 3,
                 "o")
    assert dict(trt.env) == {"TLLM_SPEC_DECODE_FORCE_NUM_ACCEPTED_TOKENS": "1.78"}


def test_an_attached_server_is_left_as_it_is():
    cfg = ServerConfig(backend="vllm", url="http://h:8000")
    assert pinned(cfg, 3.0, 3, "o") == cfg


@pytest.mark.parametrize(("cfg", "needle"), [
    (ServerConfig(backend="tgi", launch="text-generation-launcher --speculate 3"),
     "b.toml:9: classes.s.pin_accept: tgi has no synthetic-acceptance setting to pin the accept "
     "length with (pinning knows llamacpp, vllm, sglang, trtllm)"),
    (ServerConfig(backend="vllm", launch="vllm serve m --port {port}"),
     "has no --speculative-config to pin"),
    (ServerConfig(backend="vllm", launch="vllm serve m -sc ngram"), "-sc is not a JSON object"),
    (ServerConfig(backend="llamacpp", launch=LLAMA), "5 is outside [1, 4]"),
])
def test_what_cannot_be_pinned_is_one_line(cfg, needle):
    accept = 5.0 if "outside" in needle else 3.0
    with pytest.raises(ConfigError) as exc:
        pinned(cfg, accept, 3, "b.toml:9: classes.s.pin_accept")
    assert needle in str(exc.value) and "\n" not in str(exc.value)


def test_the_budget_key_is_checked(tmp_path):
    from pytest_specbound.gate.schema.budget import load_budget

    base = ('[model]\nname = "llama-3.1-8b"\n[speculative]\nmethod = "eagle3"\nsteps = 3\n'
            '[server]\nurl = "http://h:1"\n[classes.system]\nprompts = "chat"\n')
    path = tmp_path / "b.toml"
    path.write_text(base + "pin_accept = 3.0\nmin_efficiency = 0.5\n")
    assert load_budget(path).classes["system"].pin_accept == 3.0
    path.write_text(base + "pin_accept = 3.0\naccept = [2.5, 3.5]\n")
    with pytest.raises(ConfigError, match=r"b\.toml:\d+: classes\.system\.accept: a class with "
                       "pin_accept measures the system at a fixed accept length"):
        load_budget(path)
    path.write_text(base + "pin_accept = 0.5\n")
    with pytest.raises(ConfigError, match=r"classes\.system\.pin_accept: 0\.5 is outside"):
        load_budget(path)


def test_the_measured_accept_is_held_against_the_pin():
    from pytest_specbound.gate.judging.judge import Judging, judge
    from pytest_specbound.gate.schema.class_budget import ClassBudget
    from pytest_specbound.measure.measurement import Measurement
    from pytest_specbound.physics.hardware import parse_hardware
    from pytest_specbound.physics.models import load_model
    from pytest_specbound.physics.roofline import compute_roofline
    from pytest_specbound.physics.speculative import parse_speculation
    from pytest_specbound.serving.records import RequestRecord

    roof = compute_roofline(parse_hardware("h100"), load_model("llama-3.1-8b"),
                            parse_speculation("eagle3:3"))

    def measured(accept: float) -> Measurement:
        return Measurement("vllm", [RequestRecord(completion_tokens=257, ttft_s=0.02,
                                                  decode_s=256 / 200, accept_length=accept,
                                                  accept_source="server") for _ in range(8)])

    cls = ClassBudget("system", "chat", 256, limits={"min_efficiency": 0.1}, pin_accept=3.0)
    ok = judge(cls, measured(3.04), roof, how=Judging(drafter_classes=("coding",)))
    assert ok.status == "pass" and "pinned" in ok.reasons
    assert any(x.startswith("pinned: accept 3.04 at the engine's synthetic acceptance of 3")
               and x.endswith("its band is judged in coding") for x in ok.lines), ok.lines
    alone = judge(cls, measured(3.04), roof)
    assert any("no class of this budget judges its band" in x for x in alone.lines), alone.lines
    off = judge(cls, measured(2.4), roof)
    assert off.status == "fail" and "not_pinned" in off.reasons
    assert any("accept 2.40 is not the pinned 3" in x for x in off.lines), off.lines
    assert ClassBudget("s", "chat", 1, pin_accept=3.0).without_limits().pin_accept is None
