"""Real llama-server fixtures: generated GGUF models, servers launched through our own lifecycle."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from pytest_specbound.physics.gguf_writer import LlamaShape, write_llama_gguf
from pytest_specbound.serving.server import LaunchSpec, Readiness, Server, start_server


@pytest.fixture(scope="session")
def gguf_models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    pytest.importorskip("gguf")
    d = tmp_path_factory.mktemp("models")
    return {
        "target": write_llama_gguf(d / "target.gguf", LlamaShape(n_layers=4, hidden=256, ffn=512,
                                                                 heads=4)),
        "draft": write_llama_gguf(d / "draft.gguf", LlamaShape(n_layers=1, hidden=64, ffn=128,
                                                               heads=2), seed=1),
        # larger than this machine's last-level cache (105 MiB), for the bandwidth check
        "large": write_llama_gguf(d / "large.gguf", LlamaShape(n_layers=8, hidden=1024, ffn=2816,
                                                               heads=8), seed=2),
        # the same in Q4_0: llama.cpp's integer kernels, faster than any fp32 matmul probe
        "large_q4": write_llama_gguf(d / "large-q4.gguf", LlamaShape(n_layers=8, hidden=1024,
                                                                     ffn=2816, heads=8),
                                     seed=2, quant="q4_0"),
    }


@pytest.fixture(scope="session")
def llama_server_bin() -> str:
    from pytest_specbound.serving.backends.llamacpp import llama_server_binary

    return llama_server_binary()


@pytest.fixture(scope="session")
def launch_llama(
    llama_server_bin: str, gguf_models: dict[str, Path], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Callable[..., Server]]:
    """``launch_llama("target", "--spec-synth-len", "3.0", draft=True)`` -> a ready Server."""
    servers: dict[tuple[str, ...], Server] = {}
    logs = tmp_path_factory.mktemp("logs")

    def launch(model: str = "target", *extra: str, draft: bool = False) -> Server:
        key = (model, str(draft), *extra)
        if key not in servers:
            argv = [llama_server_bin, "-m", str(gguf_models[model]), "--host", "{host}",
                    "--port", "{port}", "-t", "1", "-c", "2048", "--metrics", "-np", "1"]
            if draft:
                argv += ["-md", str(gguf_models["draft"]), "--spec-type", "draft-simple",
                         "--spec-draft-n-max", "3"]
            argv += list(extra)
            servers[key] = start_server(LaunchSpec(argv), Readiness(("/health",), 120), logs,
                                        name="llama-" + model)
        return servers[key]

    yield launch
    for server in servers.values():
        server.stop()
