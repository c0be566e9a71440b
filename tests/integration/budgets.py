"""Budget texts for the generated llama models (a draft model, one ``coding`` class)."""

from __future__ import annotations

from pathlib import Path

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
