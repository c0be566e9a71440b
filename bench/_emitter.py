"""A precise token emitter for bench/client_fidelity.py, run as its own process.

Speaks llama-server's native streaming (one SSE event per token, verify steps as bursts) and
busy-waits on perf_counter so that the emission schedule is exact even at 20k tok/s. Writes the
true schedule (first and last token times on its own clock) into the final event.
"""

from __future__ import annotations

import json
import socket
import sys
import time


def serve(port: int, rate: float, accept: int, tokens: int) -> None:
    srv = socket.socket()
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind(("127.0.0.1", port))
    srv.listen(8)
    step = accept / rate  # seconds per verify step
    event = b'data: {"content":"a","tokens":[7],"stop":false}\n\n'
    while True:
        conn, _ = srv.accept()
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        data = b""
        while b"\r\n\r\n" not in data:
            data += conn.recv(65536)
        head, _, rest = data.partition(b"\r\n\r\n")
        if not head.startswith(b"POST"):  # /metrics and the like: this server has none
            conn.sendall(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
            conn.close()
            continue
        length = int(next(ln.split(b":")[1] for ln in head.split(b"\r\n")
                      if ln.lower().startswith(b"content-length")))
        while len(rest) < length:
            rest += conn.recv(65536)
        conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\n")
        conn.sendall(event)  # the first token (prefill)
        t0 = time.perf_counter()
        sent = 1
        k = 0
        while sent < tokens:
            k += 1
            due = t0 + k * step
            while time.perf_counter() < due:
                pass
            burst = min(accept, tokens - sent)
            conn.sendall(event * burst)
            sent += burst
        last = time.perf_counter()
        n = tokens
        final = {"content": "", "tokens": [], "stop": True, "timings": {
            "predicted_n": n, "predicted_ms": (last - t0) * 1e3,
            "predicted_per_second": (n - 1) / (last - t0),
            "draft_n": 3 * k, "draft_n_accepted": (n - 1) - k}}
        conn.sendall(b"data: " + json.dumps(final).encode() + b"\n\n")
        conn.close()


if __name__ == "__main__":
    serve(int(sys.argv[1]), float(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]))
