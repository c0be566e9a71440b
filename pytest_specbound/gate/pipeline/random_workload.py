"""A random-prompt class's prompts, built once the server is up, with its own tokenizer
(:mod:`~pytest_specbound.measure.random_prompts`), and kept for the run: the twin without
speculation and every level get the same prompts as the class (one model, one tokenizer)."""

from __future__ import annotations

from pytest_specbound.errors import RequestError, ServerError
from pytest_specbound.measure.random_prompts import Built, RandomPrompts, build
from pytest_specbound.serving.tokenizers import (
    ApproximateTokenizer,
    LlamaServerTokenizer,
    RouteTokenizer,
    VllmTokenizer,
)
from pytest_specbound.serving.transport import Endpoint

_BUILT: dict[tuple[str, int, str], Built] = {}


def pool_text() -> str:
    """Ordinary text (the built-in prompt classes) whose tokens the prompts are drawn from."""
    from pytest_specbound.measure.prompts import BUILTIN, load_prompts

    return "\n".join(p.text or "" for name in BUILTIN for p in load_prompts(name))


def server_tokenizer(backend: str, endpoint: Endpoint, model: str | None
                     ) -> RouteTokenizer | ApproximateTokenizer:
    """The server's own tokenizer where its routes answer; else the stated estimate."""
    names = {"vllm": "vLLM", "sglang": "SGLang"}
    tokenizer: RouteTokenizer = (
        LlamaServerTokenizer(endpoint) if backend == "llamacpp"
        else VllmTokenizer(endpoint, model, names.get(backend, backend)))
    try:
        if tokenizer.text(tokenizer.ids("Hello world")).strip() and tokenizer.count("Hello"):
            return tokenizer
        why = "its tokenize routes gave no text back"
    except RequestError as exc:
        why = f"the server has no tokenize route: {exc}"
    return ApproximateTokenizer(why)


def random_prompts(spec: RandomPrompts, count: int, backend: str, endpoint: Endpoint,
                   model: str | None, model_key: str) -> Built:
    """``count`` prompts for ``spec`` on this model (``model_key``: what names it, the same for
    the twin), built on the first call and kept."""
    key = (spec.label(), count, model_key)
    if key not in _BUILT:
        try:
            _BUILT[key] = build(spec, server_tokenizer(backend, endpoint, model), count,
                                pool_text())
        except RequestError as exc:
            raise ServerError(f"building random prompts with the server's tokenizer: {exc}"
                              ) from None
    return _BUILT[key]
