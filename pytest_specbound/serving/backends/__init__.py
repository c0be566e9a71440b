"""One module per server family behind :class:`~pytest_specbound.backends.base.Backend`."""

from __future__ import annotations

from pytest_specbound.serving.backends.base import Backend

BACKENDS = ("sglang", "vllm", "llamacpp", "trtllm", "tgi", "openai", "auto")


def get_backend(name: str, origin: str = "backend") -> Backend:
    """Instantiate a backend by name (``auto`` is resolved by :func:`detect.identify`)."""
    from pytest_specbound.errors import ConfigError

    key = name.strip().lower()
    if key == "llamacpp" or key == "llama.cpp" or key == "llama-server":
        from pytest_specbound.serving.backends.llamacpp import LlamaCpp

        return LlamaCpp()
    if key == "vllm":
        from pytest_specbound.serving.backends.vllm import VLLM

        return VLLM()
    if key == "sglang":
        from pytest_specbound.serving.backends.sglang import SGLang

        return SGLang()
    if key in ("trtllm", "tensorrt-llm", "trt-llm"):
        from pytest_specbound.serving.backends.trtllm import TRTLLM

        return TRTLLM()
    if key == "tgi":
        from pytest_specbound.serving.backends.tgi import TGI

        return TGI()
    if key in ("openai", "openai-generic"):
        from pytest_specbound.serving.backends.openai import OpenAIGeneric

        return OpenAIGeneric()
    raise ConfigError(f"{origin}={name}: unknown backend; valid: {', '.join(BACKENDS)}")
