"""A low-overhead streaming HTTP client: record (arrival time, bytes) while reading, parse after.

The read loop does no JSON work, so the client spends microseconds per token and does not steal the
CPU from a server that shares the machine. Server-sent events are split and decoded once the stream
has ended; each event carries the arrival time of the read that completed it.
"""

from __future__ import annotations

import bisect
import http.client
import itertools
import json
import socket
import struct
import time
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from .errors import RequestError


@dataclass
class StreamResult:
    sent_at: float  # perf_counter when the request was written
    events: list[tuple[float, Any]] = field(default_factory=list)  # (seconds since sent, JSON)
    done: bool = False  # saw "data: [DONE]"
    headers: dict[str, str] = field(default_factory=dict)


class Endpoint:
    """One server base URL; opens a fresh connection per request (no stale keep-alive)."""

    def __init__(self, base_url: str, api_key: str | None = None, read_timeout_s: float = 120.0):
        parts = urlsplit(base_url.rstrip("/"))
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise RequestError(f"--url={base_url}: expected http://HOST:PORT")
        self.base_url = base_url.rstrip("/")
        self.scheme = parts.scheme
        self.host = parts.hostname
        self.port = parts.port or (443 if parts.scheme == "https" else 80)
        self.prefix = parts.path
        self.api_key = api_key
        self.read_timeout_s = read_timeout_s

    def headers(self) -> dict[str, str]:
        h = {"Content-Type": "application/json", "Accept": "text/event-stream"}
        if self.api_key:
            h["Authorization"] = f"Bearer {self.api_key}"
        return h

    def _connect(self) -> http.client.HTTPConnection:
        cls = http.client.HTTPSConnection if self.scheme == "https" else http.client.HTTPConnection
        return cls(self.host, self.port, timeout=self.read_timeout_s)

    def stream(self, path: str, body: dict[str, Any]) -> StreamResult:
        """POST ``body`` and collect the SSE stream; failures raise :class:`RequestError`.

        Error texts never carry the API key, even when a server echoes it back.
        """
        try:
            return self._stream(path, body)
        except RequestError as exc:
            if self.api_key and self.api_key in str(exc):
                raise RequestError(str(exc).replace(self.api_key, "***")) from None
            raise

    def _open_socket(self) -> socket.socket:
        sock = socket.create_connection((self.host, self.port), timeout=self.read_timeout_s)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if self.scheme == "https":
            import ssl

            sock = ssl.create_default_context().wrap_socket(sock, server_hostname=self.host)
        return sock

    def _request_bytes(self, path: str, payload: bytes) -> bytes:
        lines = [f"POST {self.prefix + path} HTTP/1.1", f"Host: {self.host}:{self.port}",
                 f"Content-Length: {len(payload)}", "Connection: close"]
        lines += [f"{k}: {v}" for k, v in self.headers().items()]
        return ("\r\n".join(lines) + "\r\n\r\n").encode() + payload

    def _stream(self, path: str, body: dict[str, Any]) -> StreamResult:
        """HTTP/1.1 on a bare socket: the read loop only timestamps bytes (see module doc)."""
        payload = json.dumps(body).encode()
        reads: list[tuple[float, bytes]] = []
        clock = time.perf_counter
        try:
            sock = self._open_socket()
        except OSError as exc:
            raise RequestError(f"POST {path}: connection failed: {_why(exc)}") from None
        try:
            try:
                sock.sendall(self._request_bytes(path, payload))
                sent = clock()
                head = b""
                while b"\r\n\r\n" not in head:
                    data = sock.recv(65536)
                    if not data:
                        raise ConnectionError("closed before the response headers")
                    head += data
            except TimeoutError:
                raise self._stalled(path, 0) from None
            except OSError as exc:
                raise RequestError(f"POST {path}: connection failed: {_why(exc)}") from None
            arrived = clock()
            head, _, rest = head.partition(b"\r\n\r\n")
            status, headers = _parse_head(head)
            if status != 200:
                text = _error_body(sock, rest, headers)
                raise RequestError(f"POST {path}: HTTP {status}: {text[:300]}")
            result = StreamResult(sent_at=sent, headers=headers)
            chunked = "chunked" in headers.get("transfer-encoding", "").lower()
            if rest:
                reads.append((arrived, rest))
            _kernel_read_timeout(sock, self.read_timeout_s)
            recv = sock.recv
            append = reads.append
            try:
                while True:
                    data = recv(65536)
                    if not data:
                        break
                    append((clock(), data))
                    if chunked and data[-5:] == b"0\r\n\r\n" and _ends_body(reads):
                        break  # the server may keep the connection open after the last chunk
            except (TimeoutError, BlockingIOError):
                raise self._stalled(path, len(reads)) from None
            except OSError as exc:
                raise RequestError(
                    f"POST {path}: stream broken after {len(reads)} reads: {_why(exc)}"
                ) from None
        finally:
            sock.close()
        if chunked:
            reads = _dechunk(reads, path)
        _split_events(reads, result)
        return result

    def _stalled(self, path: str, reads: int) -> RequestError:
        return RequestError(f"POST {path}: stalled: no data for {self.read_timeout_s:g} s after "
                            f"{reads} reads (read timeout)")

    def get(self, path: str, timeout_s: float = 5.0) -> tuple[int, bytes]:
        """A small GET (health, info, metrics): (status, body); connection errors raise."""
        conn = self._connect()
        conn.timeout = timeout_s
        try:
            conn.request("GET", self.prefix + path, headers=self.headers())
            resp = conn.getresponse()
            return resp.status, resp.read()
        except (ConnectionError, OSError, http.client.HTTPException) as exc:
            raise RequestError(f"GET {path}: {_why(exc)}") from None
        finally:
            conn.close()

    def get_json(self, path: str, timeout_s: float = 5.0) -> Any:
        status, body = self.get(path, timeout_s)
        if status != 200:
            return None
        try:
            return json.loads(body)
        except ValueError:
            return None


def _kernel_read_timeout(sock: socket.socket | None, seconds: float) -> None:
    """Blocking reads with the stall timeout kept by the kernel (SO_RCVTIMEO).

    A Python-level socket timeout polls before every read, which costs about as much CPU again
    per read as the read itself; the kernel timeout costs nothing until it fires (EAGAIN).
    """
    if sock is None or not hasattr(socket, "SO_RCVTIMEO"):
        return
    whole = int(seconds)
    try:
        sock.settimeout(None)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO,
                        struct.pack("ll", whole, int((seconds - whole) * 1e6)))
    except OSError:
        sock.settimeout(seconds)  # fall back to the Python-level timeout


def _parse_head(head: bytes) -> tuple[int, dict[str, str]]:
    lines = head.decode("latin-1").split("\r\n")
    try:
        status = int(lines[0].split()[1])
    except (IndexError, ValueError):
        raise RequestError(f"not an HTTP response: {lines[0][:80]!r}") from None
    headers = {}
    for line in lines[1:]:
        key, _, value = line.partition(":")
        headers[key.strip().lower()] = value.strip()
    return status, headers


def _error_body(sock: socket.socket, rest: bytes, headers: dict[str, str]) -> str:
    """Up to 2000 bytes of an error response body, as one line."""
    sock.settimeout(2.0)
    want = int(headers.get("content-length", "2000") or 2000)
    try:
        while len(rest) < min(want, 2000):
            data = sock.recv(4096)
            if not data:
                break
            rest += data
    except OSError:
        pass
    if "chunked" in headers.get("transfer-encoding", "").lower():
        rest = b"".join(d for _, d in _dechunk([(0.0, rest)], "", strict=False))
    return rest[:2000].decode("utf-8", "replace").strip().replace("\n", " ")


def _ends_body(reads: list[tuple[float, bytes]]) -> bool:
    """Does the stream end with the zero-size last chunk (CRLF, "0", CRLF, CRLF)?"""
    tail = b"".join(d for _, d in reads[-2:])[-7:]
    return tail == b"\r\n0\r\n\r\n" or (len(reads) == 1 and reads[0][1] == b"0\r\n\r\n")


def _dechunk(reads: list[tuple[float, bytes]], path: str,
             strict: bool = True) -> list[tuple[float, bytes]]:
    """Undo chunked transfer encoding; each payload piece keeps the time of the read it came in."""
    raw = b"".join(d for _, d in reads)
    ends = list(itertools.accumulate(len(d) for _, d in reads))  # raw offset after each read
    out: list[tuple[float, bytes]] = []
    pos, done = 0, False
    while pos < len(raw):
        line_end = raw.find(b"\r\n", pos)
        if line_end < 0:
            break
        try:
            size = int(raw[pos:line_end].split(b";")[0], 16)
        except ValueError:
            raise RequestError(f"POST {path}: bad chunked encoding at byte {pos}") from None
        start = line_end + 2
        if size == 0:
            done = True
            break
        stop = min(start + size, len(raw))
        i = bisect.bisect_right(ends, start)
        while start < stop:
            cut = min(stop, ends[i])
            out.append((reads[i][0], raw[start:cut]))
            start, i = cut, i + 1
        pos = line_end + 2 + size + 2
    if strict and not done:
        raise RequestError(f"POST {path}: stream broken after {len(reads)} reads: the "
                           "connection closed before the last chunk")
    return out


def _why(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__


def _split_events(reads: list[tuple[float, bytes]], result: StreamResult) -> None:
    buffer = b""
    index = 0
    for arrived, data in reads:
        buffer += data.replace(b"\r\n", b"\n")
        while True:
            end = buffer.find(b"\n\n")
            if end < 0:
                break
            raw, buffer = buffer[:end], buffer[end + 2:]
            index += 1
            _decode_event(raw, arrived - result.sent_at, index, result)
    if buffer.strip() and not result.done:
        raise RequestError(
            f"truncated stream: {len(result.events)} events, then an unterminated one "
            f"({buffer[:80]!r})"
        )


def _decode_event(raw: bytes, t: float, index: int, result: StreamResult) -> None:
    lines = [ln[5:].strip() for ln in raw.split(b"\n") if ln.startswith(b"data:")]
    if not lines:
        if raw.startswith(b"error:") or b"\nerror:" in raw:
            raise RequestError(f"server sent an error event: {raw[:200].decode('utf-8', 'replace')}")
        return  # comments, event: lines, keep-alives
    payload = b"\n".join(lines)
    if payload == b"[DONE]":
        result.done = True
        return
    try:
        obj = json.loads(payload)
    except ValueError as exc:
        raise RequestError(f"malformed JSON in event {index}: {exc} ({payload[:80]!r})") from None
    if isinstance(obj, dict) and "error" in obj and not obj.get("choices"):
        err = obj["error"]
        msg = err.get("message", err) if isinstance(err, dict) else err
        raise RequestError(f"server error in stream: {str(msg)[:200]}")
    result.events.append((t, obj))
