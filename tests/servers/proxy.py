"""A forwarding HTTP proxy on loopback for tests: records each request line, pipes the bytes.

Requests name any host (``http://gpu-box.invalid:PORT/...``); the proxy connects to 127.0.0.1 on
that port, so a test can show that proxies from the environment are used without leaving the
machine.
"""

from __future__ import annotations

import contextlib
import socket
import threading
from typing import Any
from urllib.parse import urlsplit


class ForwardProxy:
    def __init__(self) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.seen: list[str] = []
        self.thread = threading.Thread(target=self._serve, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.sock.getsockname()[1]}"

    def __enter__(self) -> ForwardProxy:
        self.thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        # shut the listening socket down before closing it: a close from this thread leaves the
        # accept blocked in the serving thread, and the socket with it, listening; the next
        # server bound to port 0 was once given the same port, and its first client this proxy
        # (a DCGM exporter's scrape answered with a router's /metrics)
        with contextlib.suppress(OSError):
            self.sock.shutdown(socket.SHUT_RDWR)
        self.sock.close()
        if self.thread.is_alive():
            self.thread.join(5.0)

    def _serve(self) -> None:
        while True:
            try:
                client, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._handle, args=(client,), daemon=True).start()

    def _handle(self, client: socket.socket) -> None:
        data = read_head(client)
        if data is None:
            return
        line, _, rest = data.partition(b"\r\n")
        method, target, version = line.decode().split(" ")
        self.seen.append(f"{method} {target}")
        parts = urlsplit(target)
        upstream = socket.create_connection(("127.0.0.1", parts.port or 80))
        path = parts.path + (f"?{parts.query}" if parts.query else "")
        upstream.sendall(f"{method} {path} {version}\r\n".encode() + rest)
        threading.Thread(target=_pipe, args=(client, upstream), daemon=True).start()
        _pipe(upstream, client)


def read_head(client: socket.socket) -> bytes | None:
    """The request's bytes up to the end of its headers (and what came with them)."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = client.recv(65536)
        if not chunk:
            return None
        data += chunk
    return data


def _pipe(src: socket.socket, dst: socket.socket) -> None:
    try:
        while True:
            chunk = src.recv(65536)
            if not chunk:
                break
            dst.sendall(chunk)
    except OSError:
        pass
    finally:
        for s in (src, dst):
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)
