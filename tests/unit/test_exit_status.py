"""A server's end in words: the signal by name, its likely cause, the program named."""

from __future__ import annotations

import pytest

from pytest_specbound.serving.exit_status import describe_exit, program_name, signal_of


@pytest.mark.parametrize(("argv", "name"), [
    (["/opt/venv/bin/llama-server", "-m", "x.gguf"], "llama-server"),
    (["python3", "-m", "sglang.launch_server", "--port", "1"], "sglang.launch_server"),
    ("VLLM_USE_V1=1 exec vllm serve m --port 1", "vllm"),
    ([], "server"),
])
def test_the_program_is_named_by_its_file_or_module(argv, name):
    assert program_name(argv) == name


def test_a_shell_reports_a_signal_as_128_plus_its_number():
    assert signal_of(-9) is not None and signal_of(-9).name == "SIGKILL"
    assert signal_of(137, shell=True).name == "SIGKILL"
    assert signal_of(137) is None  # a program may exit 137 itself: only a shell means the signal
    assert signal_of(2) is None and signal_of(0) is None


def test_each_end_reads_as_one_line_with_its_cause():
    killed = describe_exit(-9, ["vllm", "serve", "m"], "while it was measured")
    assert killed.startswith("vllm died of SIGKILL (killed) while it was measured: killed from "
                             "outside, most often by the kernel's out-of-memory killer")
    assert "CMAKE_ARGS" not in describe_exit(-4, ["vllm"], "while starting")  # llama.cpp's fix
    assert "CMAKE_ARGS" in describe_exit(-4, ["/x/llama-server"], "while starting")
    assert describe_exit(3, ["vllm"], "while starting") == "vllm exited with code 3 while starting"
    assert "\n" not in describe_exit(-11, "sh -c 'llama-server'", "while starting")


W = "(Worker pid=21050) ERROR 12-06 12:51:53 [multiproc_executor.py:1063] "
VLLM_LOG = "\n".join((
    "(APIServer pid=21026) INFO 12-06 12:51:26 [api_utils.py:286] non-default args: {}",
    W + "Traceback (most recent call last):",
    W + '    assert not SYNTHETIC_MODE, "Synthetic acceptance not supported with CPU sampling"',
    W + "AssertionError: Synthetic acceptance not supported with CPU sampling",
    "(EngineCore pid=21038) ERROR 12-06 12:51:53 [dump_input.py:81] Dumping scheduler stats",
    "(APIServer pid=21026) ERROR 12-06 12:51:53 [serving.py:1] vllm.v1.engine.exceptions."
    "EngineDeadError: EngineCore encountered an issue. See stack trace (above) for the root cause.",
    'INFO:     127.0.0.1:46090 - "POST /v1/completions HTTP/1.1" 500 Internal Server Error',
))


def test_the_root_cause_of_a_bare_http_500_is_read_from_the_log():
    from pytest_specbound.serving.exit_status import root_cause

    assert root_cause(VLLM_LOG) == "AssertionError: Synthetic acceptance not supported with CPU sampling"
    assert root_cause("srv  load_model: loading\nerror: failed to allocate KV cache\nmain: ok") \
        == "error: failed to allocate KV cache"
    assert root_cause("INFO all good\nINFO still good\n") is None
    only = "ERROR x EngineDeadError: EngineCore encountered an issue. See stack trace (above)"
    assert root_cause(only) == "EngineDeadError: EngineCore encountered an issue. See stack " \
        "trace (above)"  # nothing better: the pointer itself
