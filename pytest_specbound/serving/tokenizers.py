"""A served model's own tokenizer, through the server's tokenize and detokenize routes
(llama-server's ``/tokenize`` and ``/detokenize``; vLLM's, which SGLang's OpenAI server shares),
for building prompts of a set token count
(:mod:`~pytest_specbound.measure.random_prompts`). A server without them gets
:class:`ApproximateTokenizer`, whose counts are estimates and say so."""

from __future__ import annotations

import math
import re
from typing import Any

from pytest_specbound.errors import RequestError
from pytest_specbound.serving.transport import Endpoint

CHARS_PER_TOKEN = 4.0  # the estimate where the server cannot count (as for conversations)


class RouteTokenizer:
    """A server's tokenize and detokenize routes: ``count`` includes the tokens the server adds
    to every completion's prompt (a BOS), ``ids`` leaves them out."""

    exact = True
    source = "the server's /tokenize"

    def _tokens(self, text: str, special: bool) -> list[int]:
        raise NotImplementedError

    def count(self, text: str) -> int:
        return len(self._tokens(text, True))

    def ids(self, text: str) -> list[int]:
        return self._tokens(text, False)

    def text(self, ids: list[int]) -> str:
        raise NotImplementedError


class LlamaServerTokenizer(RouteTokenizer):
    """llama-server: ``/tokenize`` (``add_special`` adds the BOS a completion gets)."""

    source = "llama-server's /tokenize"

    def __init__(self, endpoint: Endpoint) -> None:
        self.endpoint = endpoint

    def _tokens(self, text: str, special: bool) -> list[int]:
        got = self.endpoint.post_json("/tokenize", {"content": text, "add_special": special})
        return _ids(got, "tokens", "/tokenize")

    def text(self, ids: list[int]) -> str:
        got = self.endpoint.post_json("/detokenize", {"tokens": ids})
        return _text(got, "content", "/detokenize")


class VllmTokenizer(RouteTokenizer):
    """vLLM (and SGLang): ``/tokenize`` adds the special tokens a completion gets unless told
    not to; ``/detokenize`` gives the text back."""

    def __init__(self, endpoint: Endpoint, model: str | None, server: str = "vLLM") -> None:
        self.endpoint, self.model = endpoint, model
        self.source = f"{server}'s /tokenize"

    def _body(self, **fields: Any) -> dict[str, Any]:
        return {**({"model": self.model} if self.model else {}), **fields}

    def _tokens(self, text: str, special: bool) -> list[int]:
        got = self.endpoint.post_json("/tokenize", self._body(prompt=text,
                                                              add_special_tokens=special))
        return _ids(got, "tokens", "/tokenize")

    def text(self, ids: list[int]) -> str:
        got = self.endpoint.post_json("/detokenize", self._body(tokens=ids))
        return _text(got, "prompt", "/detokenize")


class ApproximateTokenizer:
    """No server tokenizer: the words of ordinary text as ids, counted at
    :data:`CHARS_PER_TOKEN` characters a token. Lengths are estimates."""

    exact = False

    def __init__(self, why: str) -> None:
        self.source = f"{CHARS_PER_TOKEN:g} characters a token ({why})"
        self.words: list[str] = []
        self.index: dict[str, int] = {}

    def count(self, text: str) -> int:
        return math.ceil(len(text) / CHARS_PER_TOKEN)

    def ids(self, text: str) -> list[int]:
        out = []
        for word in re.findall(r"\S+", text):
            if word not in self.index:
                self.index[word] = len(self.words)
                self.words.append(word)
            out.append(self.index[word])
        return out

    def text(self, ids: list[int]) -> str:
        return " ".join(self.words[i % len(self.words)] for i in ids) if self.words else ""


def _ids(got: Any, key: str, route: str) -> list[int]:
    tokens = got.get(key) if isinstance(got, dict) else None
    if not isinstance(tokens, list):
        raise RequestError(f"POST {route}: no {key!r} list in the answer")
    # llama-server gives [id, piece] pairs when asked for pieces; ids alone otherwise
    return [int(t[0] if isinstance(t, list) else t.get("id", 0) if isinstance(t, dict) else t)
            for t in tokens]


def _text(got: Any, key: str, route: str) -> str:
    text = got.get(key) if isinstance(got, dict) else None
    if not isinstance(text, str):
        raise RequestError(f"POST {route}: no {key!r} text in the answer")
    return text
