"""Budget texts for the generated llama models (a draft model, one ``coding`` class)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pytest_specbound.advisers.against_sweep import Points

UNUSED_URL = 'url = "http://unused.invalid:1"'  # the tests pass --specbound-url or launch


def llama_budget(target: Path, draft: Path, coding: str, *, steps: int = 3,
                 server: str = UNUSED_URL, roofline: str = "") -> str:
    """``[model]``, ``[speculative]`` (draft, ``steps``), ``[server]`` (llamacpp, ``server``),
    ``[roofline]`` when given, and ``[classes.coding]`` with the coding prompts plus ``coding``."""
    tables = f"""
[model]
gguf = "{target}"

[speculative]
method = "draft"
steps = {steps}
draft_model = "{draft}"

[server]
backend = "llamacpp"
{server}
"""
    if roofline:
        tables += f"\n[roofline]\n{roofline}\n"
    return tables + f"""
[classes.coding]
prompts = "coding"
{coding}"""


def synth_launch(server: str, target: Path, draft: Path, rates: str, context: int,
                 slots: int) -> str:
    """llama-server with a draft model that drafts for real and llama.cpp's synthetic
    acceptance per position (``rates``, one a position), 3 draft steps."""
    return (f"{server} -m {target} -md {draft} --spec-type draft-simple --spec-draft-n-max 3 "
            f"--spec-synth-rates {rates} --host {{host}} --port {{port}} -t 1 -c {context} "
            f"-np {slots} --metrics")


def vllm_ngram_budget(model: Path, extra_argv: tuple[str, ...] = (), tables: str = "",
                      served_name: bool = False, one_process: bool = False) -> str:
    """A budget for the real CPU vLLM on a generated tiny llama with n-gram speculation of 3
    tokens, launched by the gate; ``tables`` the rest of it (the twin, the classes).
    ``one_process``: the engine and its worker in the API server's process (a launch takes
    about 20 s on 2 cores instead of 35-45: each process imports torch and vLLM)."""
    import json
    import shlex
    import sys

    spec = json.dumps({"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_max": 4})
    argv = [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", str(model),
            "--host", "{host}", "--port", "{port}", "--enforce-eager", "--max-model-len", "2048",
            *extra_argv, "--speculative-config", spec]
    env = 'HF_HUB_OFFLINE = "1", VLLM_CPU_KVCACHE_SPACE = "1", TOKENIZERS_PARALLELISM = "false"'
    if one_process:
        argv[-2:-2] = ["--distributed-executor-backend", "uni"]
        env += ', VLLM_ENABLE_V1_MULTIPROCESSING = "0"'
    name = f'served_name = "{model}"\n' if served_name else ""
    return f"""
[model]
config = "{model}/config.json"
{name}
[speculative]
method = "ngram"
steps = 3

[server]
backend = "vllm"
launch = '''{shlex.join(argv)}'''
ready_timeout_s = 400
env = {{ {env} }}
{tables}"""


def sweep_text(points: Points) -> str:
    """A sweep's points, a line per K: each level's rate and accept length (for a failure's
    message)."""
    return "".join(f"sweep K={k}: " + ", ".join(
        f"c{c} {m.rate:.0f} tok/s accept {m.accept:.2f}" for c, m in sorted(points[k].items()))
        + "\n" for k in sorted(points))
