"""One server per distinct launch config per test run, shared across pytest-xdist workers.

Without xdist the pool is a dict. With xdist, pytest-xdist's documented recipe applies: a
:class:`filelock.FileLock` in the directory all workers share; the first worker launches and
writes the server's URL to a state file, the others attach. A reference count in the same file
tells the launching worker when the last user is done, and only then is the server stopped.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import time
from collections.abc import Callable, Mapping
from pathlib import Path

from pytest_specbound._toml import TomlTable
from pytest_specbound.errors import ServerError
from pytest_specbound.serving.backends import get_backend
from pytest_specbound.serving.backends.base import Backend
from pytest_specbound.serving.connect import ServerConfig, api_key_from_env, open_server
from pytest_specbound.serving.server import Server

OWNER_WAIT_S = 3600.0  # the launching worker waits this long for the others to finish


class ServerPool:
    def __init__(self, log_dir: Path, shared_dir: Path | None = None,
                 worker: str = "main", say: Callable[[str], None] | None = None) -> None:
        self.log_dir = log_dir
        self.shared_dir = shared_dir
        self.worker = worker
        self.say = say
        self._servers: dict[str, tuple[Server, Backend]] = {}
        self._failed: dict[str, str] = {}  # a launch or attach that failed is not tried again
        self._joined: list[str] = []

    def get(self, cfg: ServerConfig, extra: Mapping[str, str] | None = None,
            name: str = "server") -> tuple[Server, Backend]:
        key = cfg.key()
        if key in self._failed:
            raise ServerError(f"{self._failed[key]} (failed earlier in this session; not retried)")
        if key not in self._servers:
            try:
                self._servers[key] = (self._shared(key, cfg, extra, name) if self.shared_dir
                                      else open_server(cfg, self.log_dir, extra, name, self.say))
            except ServerError as exc:
                self._failed[key] = str(exc)
                raise
        server, backend = self._servers[key]
        death = server.death("during the run")
        if death:
            raise ServerError(death)
        return server, backend

    def _files(self, key: str) -> tuple[Path, Path]:
        assert self.shared_dir is not None
        digest = hashlib.sha256(key.encode()).hexdigest()[:16]
        return self.shared_dir / f"specbound-{digest}.lock", self.shared_dir / f"specbound-{digest}.json"

    def _shared(self, key: str, cfg: ServerConfig, extra: Mapping[str, str] | None,
                name: str) -> tuple[Server, Backend]:
        from filelock import FileLock

        lock_path, state_path = self._files(key)
        with FileLock(str(lock_path)):
            state: TomlTable = json.loads(state_path.read_text()) if state_path.is_file() else {}
            if state.get("error"):
                raise ServerError(state["error"])
            if state.get("url"):
                state["refs"] += 1
                state_path.write_text(json.dumps(state))
                self._joined.append(key)
                server = Server.attach(state["url"], api_key_from_env(cfg.api_key_env),
                                       cfg.read_timeout_s, cfg.ca_bundle)
                return server, get_backend(state["backend"])
            try:
                server, backend = open_server(cfg, self.log_dir, extra, name, self.say)
            except ServerError as exc:
                state_path.write_text(json.dumps({"error": str(exc)}))
                raise
            state_path.write_text(json.dumps({"url": server.url, "backend": backend.name,
                                              "owner": self.worker, "refs": 1,
                                              "pid": server.process.pid if server.process else None}))
            self._joined.append(key)
            return server, backend

    def close(self) -> None:
        """Leave every shared server; stop the ones this process launched once nobody uses them."""
        for key, (server, _) in list(self._servers.items()):
            if self.shared_dir and key in self._joined:
                self._leave(key, server)
            else:
                server.stop()
        self._servers.clear()

    def _leave(self, key: str, server: Server) -> None:
        from filelock import FileLock

        lock_path, state_path = self._files(key)
        with FileLock(str(lock_path)):
            state = json.loads(state_path.read_text())
            state["refs"] -= 1
            state_path.write_text(json.dumps(state))
        if not server.owned:
            return
        deadline = time.monotonic() + OWNER_WAIT_S
        while time.monotonic() < deadline:
            with FileLock(str(lock_path)):
                if json.loads(state_path.read_text())["refs"] <= 0:
                    break
            time.sleep(0.2)
        server.stop()
        with FileLock(str(lock_path)):
            state_path.write_text(json.dumps({"stopped": True, "refs": 0}))

    def running(self, cfg: ServerConfig) -> bool:
        """Whether ``cfg``'s server is up in this pool (launched or joined, not stopped)."""
        return cfg.key() in self._servers

    def stop(self, cfg: ServerConfig) -> None:
        """Stop the one server ``cfg`` launched here (not one shared with other workers)."""
        key = cfg.key()
        found = self._servers.get(key)
        if found is not None and found[0].owned and key not in self._joined:
            found[0].stop()
            del self._servers[key]

    def stop_launched(self) -> None:
        """Stop the servers this process launched and alone uses (a speculative server and its
        twin without speculation must not share the hardware while either is measured); under
        xdist, those no other worker has joined."""
        for key, (server, _) in list(self._servers.items()):
            if not server.owned:
                continue
            if key in self._joined:
                if not self._alone_on(key):
                    continue
                self._leave(key, server)
                self._joined.remove(key)
            else:
                server.stop()
            del self._servers[key]

    def _alone_on(self, key: str) -> bool:
        from filelock import FileLock

        lock_path, state_path = self._files(key)
        with FileLock(str(lock_path)):
            return int(json.loads(state_path.read_text()).get("refs", 0)) <= 1

    def stop_owned_now(self) -> None:
        """On interrupt: stop what this process launched at once, users or not."""
        for server, _ in self._servers.values():
            with contextlib.suppress(Exception):
                server.stop(grace_s=5.0)
        self._servers.clear()


def worker_id() -> str:
    return os.environ.get("PYTEST_XDIST_WORKER", "main")
