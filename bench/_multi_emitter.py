"""A precise token emitter for many streams at once (bench/client_streams.py), its own process.

It behaves like a batching server: one verify step every ``accept / rate`` seconds on a global
clock, and at each step every stream in flight gets a burst of ``accept`` tokens (the first
token of a stream goes out when its request arrives, like prefill). One thread sleeps until just
before a step, busy-waits to its exact time and sends every stream's burst. llama-server's
native streaming; the final event carries the true schedule (first and last token send times, on
the emitter's perf_counter, which is the system's monotonic clock).
"""

from __future__ import annotations

import json
import math
import select
import socket
import sys
import time
from dataclasses import dataclass

EVENT = b'data: {"content":"a","tokens":[7],"stop":false}\n\n'
EARLY_S = 0.0005  # wake this long before a burst is due, then busy-wait


@dataclass
class Stream:
    conn: socket.socket
    data: bytes = b""
    t0: float = 0.0
    sent: int = 0
    bursts: int = 0
    started: bool = False


def request_complete(data: bytes) -> bool:
    head, sep, rest = data.partition(b"\r\n\r\n")
    if not sep:
        return False
    length = next((int(ln.split(b":")[1]) for ln in head.split(b"\r\n")
                   if ln.lower().startswith(b"content-length")), 0)
    return len(rest) >= length


def serve(port: int, rate: float, accept: int, tokens: int) -> None:
    srv = socket.socket()
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind(("127.0.0.1", port))
    srv.listen(256)
    step = accept / rate
    origin = time.perf_counter()
    streams: dict[socket.socket, Stream] = {}
    while True:
        active = [s for s in streams.values() if s.started]
        now = time.perf_counter()
        due = origin + math.floor((now - origin) / step + 1) * step if active else None
        timeout = 0.05 if due is None else max(0.0, due - now - EARLY_S)
        waiting = [s.conn for s in streams.values() if not s.started]
        readable, _, _ = select.select([srv, *waiting], [], [], timeout)
        for sock in readable:
            if sock is srv:
                conn, _ = srv.accept()
                conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                streams[conn] = Stream(conn)
                continue
            s = streams[sock]
            chunk = sock.recv(65536)
            if not chunk:
                sock.close()
                del streams[sock]
                continue
            s.data += chunk
            if request_complete(s.data):
                if not s.data.startswith(b"POST"):  # /metrics and the like: none here
                    sock.sendall(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n"
                                 b"Connection: close\r\n\r\n")
                    sock.close()
                    del streams[sock]
                    continue
                sock.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
                             b"Connection: close\r\n\r\n" + EVENT)  # the first token
                s.t0, s.sent, s.started = time.perf_counter(), 1, True
        if due is None or due - time.perf_counter() > EARLY_S:
            continue
        while time.perf_counter() < due:
            pass
        for s in [s for s in streams.values() if s.started and s.t0 < due]:
            burst = min(accept, tokens - s.sent)
            s.conn.sendall(EVENT * burst)
            s.sent += burst
            s.bursts += 1
            if s.sent >= tokens:
                last = time.perf_counter()
                final = {"content": "", "tokens": [], "stop": True, "timings": {
                    "predicted_n": tokens, "predicted_ms": (last - s.t0) * 1e3,
                    "predicted_per_second": (tokens - 1) / (last - s.t0),
                    "t0_abs": s.t0, "last_abs": last,
                    "draft_n": 3 * s.bursts, "draft_n_accepted": (tokens - 1) - s.bursts}}
                s.conn.sendall(b"data: " + json.dumps(final).encode() + b"\n\n")
                s.conn.close()
                del streams[s.conn]


if __name__ == "__main__":
    serve(int(sys.argv[1]), float(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]))
