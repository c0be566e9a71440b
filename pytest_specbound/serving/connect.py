"""Launch or attach, wait until ready, resolve ``auto`` to a backend: shared by CLI and plugin."""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from pytest_specbound.errors import ConfigError
from pytest_specbound.serving.backends import get_backend
from pytest_specbound.serving.backends.base import Backend
from pytest_specbound.serving.backends.detect import identify
from pytest_specbound.serving.server import LaunchSpec, Readiness, Server, check_resolves, start_server
from pytest_specbound.serving.transport import API_KEY_ENV, ApiKey

DEFAULT_READY_TIMEOUT_S = 900.0


def api_key_from_env(name: str | None) -> ApiKey:
    """The API key in the variable ``name`` (default ``SPECBOUND_API_KEY``); never printed."""
    variable = name or API_KEY_ENV
    return ApiKey(os.environ.get(variable) or None, variable)


def placeholders() -> dict[str, str]:
    """Values for ``{llama_server}`` and the other placeholders a launch command may use."""
    values: dict[str, str] = {}
    try:
        from pytest_specbound.serving.backends.llamacpp import llama_server_binary

        values["llama_server"] = llama_server_binary()
    except ConfigError:
        pass
    return values


@dataclass(frozen=True)
class ServerConfig:
    """Where the server is: a URL to attach to, or a command to launch."""

    backend: str = "auto"
    url: str | None = None
    launch: str | None = None
    ready_timeout_s: float = DEFAULT_READY_TIMEOUT_S
    api_key_env: str | None = None
    host: str = "127.0.0.1"
    port: int | None = None
    env: tuple[tuple[str, str], ...] = ()
    cwd: str | None = None
    model_id: str | None = None  # the "model" field sent in requests
    read_timeout_s: float = 120.0
    ca_bundle: str | None = None  # CA bundle for https (default: environment, then certifi)
    check_model: bool = True  # the served model must match the budget's
    check_settings: bool = True  # the server's speculation, TP, slots must match the budget's
    origin: str = field(default="url", compare=False)  # where the url came from, for errors

    def key(self) -> str:
        """Identity of the server this config starts (one server per distinct key)."""
        return repr((self.backend, self.url, self.launch, self.host, self.port, self.env, self.cwd))


def open_server(cfg: ServerConfig, log_dir: Path, extra: Mapping[str, str] | None = None,
                name: str = "server", say: Callable[[str], None] | None = None,
                ) -> tuple[Server, Backend]:
    """Attach or launch per ``cfg`` and return the ready server and its backend.

    A URL whose host does not resolve fails at once; a server that refuses connections or
    answers 503 is waited for, with a line to ``say`` at least every 15 s.
    """
    api_key = api_key_from_env(cfg.api_key_env)
    if not cfg.url and not cfg.launch:
        raise ConfigError("server: give a url to attach to or a launch command")
    backend = get_backend(cfg.backend) if cfg.backend != "auto" else None
    paths = backend.ready_paths if backend else ("/health",)
    if cfg.url:
        server = Server.attach(cfg.url, api_key, cfg.read_timeout_s, cfg.ca_bundle, cfg.origin)
        check_resolves(server.endpoint, cfg.origin)
        server.wait_ready(paths, cfg.ready_timeout_s, say)
    else:
        assert cfg.launch is not None
        spec = LaunchSpec(cfg.launch, cfg.host, cfg.port, dict(cfg.env), cfg.cwd,
                          placeholders={**placeholders(), **(extra or {})})
        server = start_server(spec, Readiness(paths, cfg.ready_timeout_s, say), log_dir, api_key,
                              cfg.read_timeout_s, name)
    try:
        if backend is None:
            backend = get_backend(identify(server.endpoint))
            server.wait_ready(backend.ready_paths, cfg.ready_timeout_s, say)
    except BaseException:
        server.stop()
        raise
    return server, backend
