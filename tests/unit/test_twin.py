"""The no-speculation twin: speculation flags removed per server family, and the cases where
they cannot be removed safely refused with one line naming what to set."""

from __future__ import annotations

import shlex

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pytest_specbound.errors import ConfigError
from pytest_specbound.serving.twin import without_speculation

ORIGIN = "b.toml:7: server.launch"


@pytest.mark.parametrize(("launch", "backend", "expected"), [
    ("llama-server -m t.gguf -md d.gguf --spec-type draft-simple --spec-draft-n-max 3 "
     "--spec-synth-len 3.0 --host h --port 1 -t 1 --metrics", "auto",
     "llama-server -m t.gguf --host h --port 1 -t 1 --metrics"),
    ("{llama_server} -m {demo_gguf} --model-draft={demo_draft_gguf} --spec-draft-n-max=5 "
     "-ngld 99 -td 2 --port {port}", "llamacpp",
     "{llama_server} -m {demo_gguf} --port {port}"),
    ("llama-server -m t.gguf --spec-type ngram-simple --spec-default -c 4096", "auto",
     "llama-server -m t.gguf -c 4096"),
    ("llama-server -m t.gguf -md d.gguf --spec-replace '<a>' '<b>' -np 4", "auto",
     "llama-server -m t.gguf -np 4"),
    ("vllm serve /m --speculative-config '{\"method\": \"ngram\", \"num_speculative_tokens\": 3}'"
     " --port 8000", "auto", "vllm serve /m --port 8000"),
    ("python -m vllm.entrypoints.openai.api_server --model /m --speculative_config={} -tp 2",
     "vllm", "python -m vllm.entrypoints.openai.api_server --model /m -tp 2"),
    # vLLM refuses its per-request spec-decode metrics without speculation: both go
    ("vllm serve /m -sc '{\"method\": \"ngram\"}' --per-request-spec-decode-metrics summary "
     "--port 8000", "vllm", "vllm serve /m --port 8000"),
    ("vllm serve /m -sc {} --per-request-spec-decode-metrics=detailed", "vllm", "vllm serve /m"),
    ("python3 -m sglang.launch_server --model-path m --speculative-algorithm EAGLE3 "
     "--speculative-draft-model-path d --speculative-num-steps 3 --speculative-eagle-topk 1 "
     "--speculative-num-draft-tokens 4 --tp 8", "auto",
     "python3 -m sglang.launch_server --model-path m --tp 8"),
    ("text-generation-launcher --model-id m --speculate 2 --port 80", "tgi",
     "text-generation-launcher --model-id m --port 80"),
])
def test_speculation_flags_removed(launch: str, backend: str, expected: str) -> None:
    assert without_speculation(launch, backend, ORIGIN) == expected


@pytest.mark.parametrize(("launch", "backend", "needle"), [
    ("trtllm-serve m --extra_llm_api_options spec.yaml", "auto", "YAML"),
    ("trtllm-serve m", "trtllm", "YAML"),
    ("./serve.sh --model m", "auto", "wrapper"),
    ("bash -c 'llama-server -md d.gguf'", "llamacpp", "wrapper"),
    ("llama-server -m t.gguf --port 1", "auto", "no llamacpp speculation flag"),
    ("vllm serve /m --config c.yaml", "vllm", "config file"),
    ("llama-server --fim-qwen-7b-spec", "auto", "preset"),
    ("python my_server.py", "openai", "not known"),
])
def test_refused_with_one_line_naming_the_table(launch: str, backend: str, needle: str) -> None:
    with pytest.raises(ConfigError) as info:
        without_speculation(launch, backend, ORIGIN)
    text = str(info.value)
    assert text.startswith(ORIGIN) and needle in text and "[no_speculation] launch" in text
    assert "\n" not in text


plain_units = st.sampled_from([["-m", "t.gguf"], ["-c", "4096"], ["--port", "{port}"], ["-t", "2"],
                               ["--metrics"], ["-np", "4"], ["--host", "127.0.0.1"]])
spec_units = st.sampled_from([["-md", "d.gguf"], ["--spec-draft-n-max", "3"],
                              ["--spec-type", "ngram-mod"], ["--spec-synth-len=2.5"],
                              ["-ngld", "99"], ["--spec-default"], ["--draft-p-min", "0.5"]])
units = st.lists(st.tuples(st.booleans(), plain_units, spec_units), min_size=1, max_size=10)


@given(units)
def test_only_speculation_words_leave(drawn: list[tuple[bool, list[str], list[str]]]) -> None:
    """Speculation flags interleaved anywhere among other words: exactly the others remain,
    in order (a flag's value is never mistaken for a flag and vice versa)."""
    argv, expected = ["llama-server"], ["llama-server"]
    for is_spec, plain, flag in drawn:
        argv += flag if is_spec else plain
        expected += [] if is_spec else plain
    if argv == expected:
        argv += ["-md", "d.gguf"]
    out = without_speculation(shlex.join(argv), "auto", ORIGIN)
    assert shlex.split(out) == expected
