from __future__ import annotations

import sys
from collections.abc import Iterator

import pytest

# Imported here, in the outer process, so that pytester's in-process runs never import them
# anew: its module snapshot drops what an inner run imported, and a second run then mixes two
# generations of http.cookiejar inside requests ("You can only merge into CookieJar").
import pytest_specbound.serving.transport  # noqa: F401
from tests.conftest import PYTESTER_INI
from tests.servers.fake import FakeServer, Script

ROOT = __import__("pathlib").Path(__file__).resolve().parents[2]


@pytest.fixture
def fake_vllm() -> Iterator[FakeServer]:
    # 10 steps of 4 tokens at 7 ms a step: about 0.8 of the h100 roofline for llama-3.1-8b eagle3:3
    with FakeServer("vllm", Script(step_s=0.007)) as srv:
        yield srv


def budget_text(url: str | None = None, accept: str = "[3.5, 4.0]", min_eff: float = 0.5,
                launch: str | None = None, extra: str = "") -> str:
    server = f'url = "{url}"' if url else f"launch = '{launch}'"
    return f"""
[model]
name = "llama-3.1-8b"
served_name = "test-model"

[speculative]
method = "eagle3"
steps = 3

[server]
backend = "vllm"
{server}
ready_timeout_s = 30

[classes.chat]
prompts = "chat"
max_tokens = 41
accept = {accept}
min_efficiency = {min_eff}
{extra}
"""


@pytest.fixture
def pytester_env(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> pytest.Pytester:
    monkeypatch.setenv("PYTHONPATH", str(ROOT) + ":" + str(ROOT / "tests"))
    monkeypatch.delenv("SPECBOUND_HW", raising=False)
    monkeypatch.delenv("GITHUB_STEP_SUMMARY", raising=False)
    monkeypatch.syspath_prepend(str(ROOT))
    pytester.makeini(PYTESTER_INI)
    return pytester


PY = sys.executable
