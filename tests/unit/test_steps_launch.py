"""A launch command at another draft step count (serving/steps.py), per server family."""

from __future__ import annotations

import json
import shlex

import pytest

from pytest_specbound.errors import ConfigError
from pytest_specbound.serving.steps import with_steps


@pytest.mark.parametrize(("launch", "backend", "expected"), [
    ("{llama_server} -m t.gguf -md d.gguf --spec-draft-n-max 3 --port {port}", "llamacpp",
     "{llama_server} -m t.gguf -md d.gguf --spec-draft-n-max 6 --port {port}"),
    ("llama-server -m t.gguf -md d.gguf --port 8080", "auto",
     "llama-server -m t.gguf -md d.gguf --port 8080 --spec-draft-n-max 6"),
    ("llama-server -m t.gguf --spec-type ngram-simple --spec-draft-n-min 8 "
     "--spec-draft-n-max=9", "llamacpp",
     "llama-server -m t.gguf --spec-type ngram-simple --spec-draft-n-min 6 "
     "--spec-draft-n-max=6"),
    ("python -m sglang.launch_server --speculative-algorithm EAGLE3 --speculative-num-steps 3 "
     "--speculative-num-draft-tokens 4 --speculative-eagle-topk 1", "sglang",
     "python -m sglang.launch_server --speculative-algorithm EAGLE3 --speculative-num-steps 6 "
     "--speculative-num-draft-tokens 7 --speculative-eagle-topk 1"),
    ("/opt/wrap.sh --k {steps} --port {port}", "openai", "/opt/wrap.sh --k 6 --port {port}"),
])
def test_each_family_drafts_another_k(launch, backend, expected):
    assert with_steps(launch, backend, 6, "b.toml: server.launch") == expected


def test_vllm_rewrites_num_speculative_tokens_inside_its_json():
    spec = json.dumps({"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_max": 4})
    launch = f"vllm serve m --speculative-config '{spec}' --port {{port}}"
    argv = shlex.split(with_steps(launch, "vllm", 5, "x"))
    config = json.loads(argv[argv.index("--speculative-config") + 1])
    assert config == {"method": "ngram", "num_speculative_tokens": 5, "prompt_lookup_max": 4}
    assert argv[-1] == "{port}"


@pytest.mark.parametrize(("launch", "backend", "needle"), [
    ("llama-server -m t.gguf --port 1", "llamacpp", "no --spec-draft-n-max or --spec-type"),
    ("vllm serve m --port 1", "vllm", "no --speculative-config with num_speculative_tokens"),
    ("python -m sglang.launch_server --speculative-num-steps 3 --speculative-eagle-topk 4",
     "sglang", "a tree (--speculative-eagle-topk above 1)"),
    ("trtllm-serve m --config spec.yaml", "trtllm", "trtllm's flags are not known"),
])
def test_a_command_whose_k_cannot_be_set_says_where_to_write_it(launch, backend, needle):
    with pytest.raises(ConfigError) as err:
        with_steps(launch, backend, 4, "b.toml:9: server.launch")
    text = str(err.value)
    assert text.startswith("b.toml:9: server.launch: cannot set the draft step count") and \
        needle in text and "write {steps} where it goes" in text, text
