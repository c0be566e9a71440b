"""A router in front of a decode server, as prefill-decode routers stand (SGLang's router,
Dynamo's frontend): requests are piped to the server behind it, and its own /metrics carries
none of the server's counters (so accept and settings must be read from the decode server)."""

from __future__ import annotations

import socket
import threading
from typing import Any

from tests.servers.proxy import _pipe

ROUTER_METRICS = (b"# HELP router_requests_total Requests routed.\n"
                  b"# TYPE router_requests_total counter\nrouter_requests_total 1\n")


class Router:
    def __init__(self, upstream_port: int) -> None:
        self.upstream_port = upstream_port
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.routed: list[str] = []
        threading.Thread(target=self._serve, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.sock.getsockname()[1]}"

    def __enter__(self) -> Router:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.sock.close()

    def _serve(self) -> None:
        while True:
            try:
                client, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._handle, args=(client,), daemon=True).start()

    def _handle(self, client: socket.socket) -> None:
        data = b""
        while b"\r\n\r\n" not in data:
            chunk = client.recv(65536)
            if not chunk:
                return
            data += chunk
        path = data.split(b" ", 2)[1].decode()
        if path.startswith(("/metrics", "/server_info", "/get_server_info")):
            body = ROUTER_METRICS if path.startswith("/metrics") else b"{}"
            status = b"200 OK" if path.startswith("/metrics") else b"404 Not Found"
            client.sendall(b"HTTP/1.1 " + status + b"\r\nContent-Length: "
                           + str(len(body)).encode() + b"\r\nConnection: close\r\n\r\n" + body)
            client.close()
            return
        self.routed.append(path)
        upstream = socket.create_connection(("127.0.0.1", self.upstream_port))
        upstream.sendall(data)
        threading.Thread(target=_pipe, args=(client, upstream), daemon=True).start()
        _pipe(upstream, client)
