"""What a server runs (its own report, else its launch command) against what the budget says."""

from __future__ import annotations

from pathlib import Path

import pytest

from pytest_specbound.gate.pipeline.crosscheck import mismatches
from pytest_specbound.gate.schema.budget import load_budget
from pytest_specbound.physics.hardware import parse_hardware
from pytest_specbound.serving.backends import get_backend
from pytest_specbound.serving.settings import Served, argv_of
from pytest_specbound.serving.transport import Endpoint
from tests.servers.fake import FakeServer

ROOT = Path(__file__).resolve().parents[2]


def from_launch(backend: str, launch: str) -> Served:
    return get_backend(backend).served_from_launch(argv_of(launch))


def test_llama_server_flags():
    s = from_launch("llamacpp", "llama-server -m t.gguf -md d.gguf --spec-type draft-simple "
                                "--spec-draft-n-max 5 -t 2 -np 1 -np 4")
    assert (s.speculative, s.method, s.draft_steps, s.threads, s.slots) == (True, "draft", 5, 2, 4)
    assert s.sources["slots"] == "launch: -np 4"  # the last flag wins, as in llama.cpp
    assert from_launch("llamacpp", "llama-server -m t.gguf").speculative is False
    assert from_launch("llamacpp", "./serve.sh -m t.gguf").speculative is None  # a wrapper


def test_vllm_flags():
    s = from_launch("vllm", """python -m vllm.entrypoints.openai.api_server --model m
        --speculative-config '{"method": "eagle3", "num_speculative_tokens": 3}' -tp 2
        --enforce-eager --dtype bfloat16 --max-num-seqs 8""")
    assert (s.method, s.draft_steps, s.tp_size, s.eager, s.dtype, s.slots) == \
        ("eagle3", 3, 2, True, "bfloat16", 8)
    assert from_launch("vllm", "vllm serve m").speculative is False


@pytest.mark.parametrize("name", ["qwen3.6-27b", "llama-3.1-8b-eagle3", "cpu-demo"])
def test_the_shipped_budgets_agree_with_their_own_launch_commands(name):
    budget = load_budget(ROOT / "budgets" / f"{name}.toml")
    hw = parse_hardware({"qwen3.6-27b": "a6000x2", "llama-3.1-8b-eagle3": "h100",
                         "cpu-demo": "cpu"}[name])
    served = get_backend(budget.server.backend).served_from_launch(argv_of(budget.server.launch))
    assert served.speculative is True and served.draft_steps == budget.speculation.steps
    assert mismatches(budget, hw, served) == []


def test_a_server_that_runs_something_else_is_named_with_its_source(tmp_path):
    path = tmp_path / "b.toml"
    path.write_text('[model]\nname = "qwen3.6-27b"\ndtype = "bf16"\n[speculative]\n'
                    'method = "mtp"\nsteps = 3\n[server]\nbackend = "sglang"\n'
                    'url = "http://127.0.0.1:9"\n[classes.chat]\n')
    budget = load_budget(path)
    with FakeServer("sglang") as fake:  # reports EAGLE3, 3 steps, TP 1
        backend = get_backend("sglang")
        endpoint = Endpoint(fake.url)
        served = backend.served(endpoint, backend.info(endpoint), None)
    found = mismatches(budget, parse_hardware("h100x2"), served)
    assert found == [
        f"budget says mtp:3 ({path}:5: speculative.method); the server runs eagle3 "
        "(/server_info speculative_algorithm EAGLE3)",
        "hardware h100-sxmx2 has 2 GPUs; the server runs TP 1 (/server_info tp_size 1)"]


def test_dtype_and_threads(tmp_path):
    path = tmp_path / "b.toml"
    path.write_text('[model]\nname = "llama-3.1-8b"\ndtype = "bf16"\n[server]\nurl = "http://x:9"\n'
                    "[roofline]\nthreads = 2\n[classes.chat]\n")
    budget = load_budget(path)
    served = Served(dtype="float16", threads=4,
                    sources={"dtype": "launch: --dtype float16", "threads": "launch: -t 4"})
    assert mismatches(budget, parse_hardware("cpu"), served) == [
        f"budget says 2 threads ({path}:7: roofline.threads); the server runs 4 (launch: -t 4)",
        "budget says dtype bf16; the server runs float16 (launch: --dtype float16)"]
    assert mismatches(budget, parse_hardware("cpu"), Served(dtype="bfloat16", sources={
        "dtype": "x"})) == []


def test_eager_mode_explains_a_system_failure_on_a_gpu_only():
    from pytest_specbound.gate.pipeline.crosscheck import setting_findings
    from pytest_specbound.gate.verdicts.verdict import Verdict, explained

    served = from_launch("vllm", "vllm serve m --enforce-eager")
    found = setting_findings(parse_hardware("h100"), served)
    assert found == [("eager", "the server runs in eager mode, CUDA graphs off (launch: "
                               "--enforce-eager): each forward pays its kernel launches, which "
                               "the roofline assumes graphs remove")]
    failed = Verdict("fail", ["decode 40 tok/s < floor 50 tok/s"], ("efficiency_below_min",),
                     "system")
    assert explained(failed, found).lines[-1].startswith("why: the server runs in eager mode")
    drafter = Verdict("fail", ["accept below band"], ("accept_below_band",), "drafter")
    assert explained(drafter, found) == drafter  # the drafter moved: eager mode does not explain it
    assert setting_findings(parse_hardware("cpu"), served) == []  # no CUDA graphs on a CPU
    assert setting_findings(parse_hardware("h100"), Served()) == []


def test_tgi_launcher_flags():
    s = from_launch("tgi", "text-generation-launcher --model-id m --num-shard 2 --speculate 3 "
                           "--max-batch-size 8 --dtype bfloat16")
    assert (s.speculative, s.draft_steps, s.method, s.tp_size, s.slots, s.dtype) == \
        (True, 3, None, 2, 8, "bfloat16")
    assert s.sources["draft_steps"] == "launch: --speculate 3"
    assert from_launch("tgi", "text-generation-launcher --model-id m").speculative is False
    assert from_launch("tgi", "./serve.sh --model-id m").speculative is None  # a wrapper


def test_trtllm_config_yaml(tmp_path):
    config = tmp_path / "extra.yaml"
    config.write_text("""# served by CI
enable_iter_perf_stats: true
speculative_config:
  decoding_type: Eagle3   # the draft head
  max_draft_len: 3
  speculative_model: "/models/draft"
return_perf_metrics: true
""")
    s = from_launch("trtllm", f"trtllm-serve m --backend pytorch --tp_size 2 --max_batch_size 4 "
                              f"--config {config}")
    assert (s.speculative, s.method, s.draft_steps, s.tp_size, s.slots) == (True, "eagle3", 3, 2, 4)
    assert s.sources["draft_steps"] == f"{config}: speculative_config: 3 draft tokens"
    plain = tmp_path / "plain.yaml"
    plain.write_text("enable_iter_perf_stats: true\n")
    assert from_launch("trtllm", f"trtllm-serve m --config {plain}").speculative is False
    assert from_launch("trtllm", "trtllm-serve m").speculative is False
    elsewhere = from_launch("trtllm", "trtllm-serve m --tp_size 2 --config /elsewhere.yaml")
    assert elsewhere.speculative is None and elsewhere.tp_size == 2  # unreadable: unknown


def test_a_trtllm_budget_whose_steps_differ_is_named_with_both(tmp_path):
    config = tmp_path / "extra.yaml"
    config.write_text("speculative_config:\n  decoding_type: MTP\n  max_draft_len: 2\n")
    budget = tmp_path / "b.toml"
    budget.write_text(f"""[model]
name = "qwen3.6-27b"
[speculative]
method = "mtp"
steps = 3
[server]
backend = "trtllm"
launch = "trtllm-serve m --tp_size 2 --config {config} --host {{host}} --port {{port}}"
[classes.coding]
prompts = "coding"
""")
    b = load_budget(budget)
    served = get_backend("trtllm").served_from_launch(argv_of(b.server.launch))
    found = mismatches(b, parse_hardware("a6000x2"), served)
    assert len(found) == 1 and "budget says mtp:3" in found[0] and "2 draft steps" in found[0]
    assert f"{config}: speculative_config: 2 draft tokens" in found[0]


@pytest.mark.parametrize(("launch", "names", "expected"), [
    ("vllm serve m", ("vllm.entrypoints", "vllm"), True),
    ("/opt/venv/bin/vllm serve m", ("vllm.entrypoints", "vllm"), True),
    ("python -m vllm.entrypoints.openai.api_server --model m", ("vllm.entrypoints", "vllm"), True),
    ("env CUDA_VISIBLE_DEVICES=0 vllm serve m", ("vllm.entrypoints", "vllm"), True),
    # a path that merely contains the name is not the server (a venv called novllm)
    ("/ci/venv-novllm/bin/python -m tests.servers.fake --family vllm", ("vllm.entrypoints", "vllm"),
     False),
    ("./serve-vllm.sh --port 8000", ("vllm.entrypoints", "vllm"), False),
    ("/usr/local/bin/llama-server -m x.gguf", ("llama-server",), True),
    ("python3 -msglang.launch_server --model-path m", ("sglang",), True),
    ("", ("sglang",), False),
])
def test_the_server_itself_is_told_from_a_wrapper(launch, names, expected):
    from pytest_specbound.serving.settings import argv_of, runs

    assert runs(argv_of(launch), *names) is expected
