"""A router in front of a decode server, as prefill-decode routers stand (SGLang's router,
Dynamo's frontend): requests are piped to the server behind it, and its own /metrics carries
none of the server's counters (so accept and settings must be read from the decode server)."""

from __future__ import annotations

import socket
import threading

from tests.servers.proxy import ForwardProxy, _pipe, read_head

ROUTER_METRICS = (b"# HELP router_requests_total Requests routed.\n"
                  b"# TYPE router_requests_total counter\nrouter_requests_total 1\n")


class Router(ForwardProxy):
    """Pipes every request to ``upstream_port`` but /metrics and /server_info, which it answers
    as a router does (its own counters; no server info)."""

    def __init__(self, upstream_port: int) -> None:
        super().__init__()
        self.upstream_port = upstream_port
        self.routed: list[str] = []

    def _handle(self, client: socket.socket) -> None:
        data = read_head(client)
        if data is None:
            return
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
