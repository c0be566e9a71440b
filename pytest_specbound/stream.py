"""A low-overhead streaming HTTP client: record (arrival time, bytes) while reading, parse after.

The read loop does no JSON work, so the client spends microseconds per token and does not steal the
CPU from a server that shares the machine. Server-sent events are split and decoded once the stream
has ended; each event carries the arrival time of the read that completed it.
"""

from __future__ import annotations

import http.client
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

    def _stream(self, path: str, body: dict[str, Any]) -> StreamResult:
        payload = json.dumps(body).encode()
        conn = self._connect()
        reads: list[tuple[float, bytes]] = []
        try:
            try:
                conn.request("POST", self.prefix + path, payload, self.headers())
                sent = time.perf_counter()
                resp = conn.getresponse()
            except (ConnectionError, OSError, http.client.HTTPException) as exc:
                raise RequestError(f"POST {path}: connection failed: {_why(exc)}") from None
            if resp.status != 200:
                text = resp.read(2000).decode("utf-8", "replace").strip().replace("\n", " ")
                raise RequestError(f"POST {path}: HTTP {resp.status}: {text[:300]}")
            result = StreamResult(sent_at=sent, headers={k.lower(): v for k, v in resp.getheaders()})
            _kernel_read_timeout(conn.sock, self.read_timeout_s)
            clock = time.perf_counter
            read1 = resp.read1
            append = reads.append
            try:
                while True:
                    data = read1(65536)
                    if not data:
                        if data is None:  # SO_RCVTIMEO fired: the read would block
                            raise BlockingIOError
                        break
                    append((clock(), data))
            except (TimeoutError, BlockingIOError):
                raise self._stalled(path, len(reads)) from None
            except (ConnectionError, OSError, http.client.HTTPException) as exc:
                last = reads[-1][0] if reads else sent
                if clock() - last >= 0.9 * self.read_timeout_s:  # the kernel timeout fired
                    raise self._stalled(path, len(reads)) from None
                raise RequestError(
                    f"POST {path}: stream broken after {len(reads)} reads: {_why(exc)}"
                ) from None
        finally:
            conn.close()
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
