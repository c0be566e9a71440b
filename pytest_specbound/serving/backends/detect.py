"""``backend = "auto"``: identify the server family from its info endpoints."""

from __future__ import annotations

from pytest_specbound.errors import RequestError
from pytest_specbound.serving.transport import Endpoint


def identify(endpoint: Endpoint) -> str:
    """Return a backend name; ``openai`` when nothing more specific answers."""

    def get_json(path: str) -> object:
        try:
            return endpoint.get_json(path)
        except RequestError:
            return None

    props = get_json("/props")
    if isinstance(props, dict) and "default_generation_settings" in props:
        return "llamacpp"
    for path in ("/server_info", "/get_server_info"):
        info = get_json(path)
        if isinstance(info, dict) and ("internal_states" in info or "tp_size" in info):
            return "sglang"
    info = get_json("/info")
    if isinstance(info, dict) and "model_id" in info and "max_total_tokens" in info:
        return "tgi"
    version = get_json("/version")
    if isinstance(version, dict) and "version" in version:
        try:
            status, body = endpoint.get("/metrics")
        except RequestError:
            status, body = 0, b""
        if status == 200 and body.lstrip().startswith(b"["):
            return "trtllm"
        return "vllm"
    return "openai"
