"""Stamping every socket read as it arrives: a receiver thread per streamed connection (the
kernel's receive time where Linux gives it), http.client reading from what it received, and the
urllib3 connections and requests adapter that install both."""

from __future__ import annotations

import collections
import functools
import http.client
import io
import platform
import socket
import struct
import sys
import threading
import time
from typing import Any

import urllib3
from requests.adapters import HTTPAdapter
from urllib3.connection import HTTPSConnection
from urllib3.connectionpool import HTTPConnectionPool, HTTPSConnectionPool

READ_SIZE = 1 << 16


# -- a receiver thread per connection ----------------------------------------------------
class Receiver(threading.Thread):
    """Owns the receive side of one connection: blocking reads, each stamped as it arrives.

    It is blocked in ``recv`` before the request is written (plain http): on a machine whose CPUs
    the server keeps busy, a thread that only starts reading after its send can be left off the
    CPU until the whole stream has been written (seen with vLLM on 2 cores: ``sendall`` returned
    after 250 ms with the full response queued). It never gives up on its own: the reader and
    :meth:`Endpoint.stream` keep the stall timeout and close the connection to stop it.

    Where the kernel offers it (Linux: ``SO_TIMESTAMPNS``), a read is stamped with the time the
    kernel received its newest bytes, not the time this thread got to run: a thread left waiting
    for the CPU or the GIL (N streams, a 2-core runner, a descheduled virtual CPU) no longer
    stamps late. The kernel's clock is the wall clock, mapped onto ``perf_counter``.
    """

    def __init__(self, sock: Any) -> None:
        super().__init__(daemon=True, name="specbound-recv")
        self.sock = sock
        self._ref = sock.makefile("rb", buffering=0)  # keeps the fd open while we read
        self.chunks: collections.deque[bytes] = collections.deque()
        self.times: list[float] = []  # arrival time of each socket read that brought bytes
        self.error: BaseException | None = None
        self.eof = False
        self.cond = threading.Condition()
        self.waiting = False  # the reader sleeps on cond: only then is a notify needed
        self.settled = threading.Event()  # EOF, an error, or what looks like the last chunk
        self.running = threading.Event()  # set just before the first recv
        self.started_at = time.perf_counter()
        self.kernel_stamps = kernel_stamps(sock)
        self.unstamped = 0  # reads that came without the kernel's receive time

    def start_reading(self) -> None:
        """Start the thread and return once it is about to block in its first ``recv``."""
        self.start()
        self.running.wait(1.0)

    def run(self) -> None:
        recv, clock, times, chunks = self.sock.recv, time.perf_counter, self.times, self.chunks
        recvmsg = self.sock.recvmsg if self.kernel_stamps else None
        wall_minus_mono = time.time() - clock()
        cond = self.cond
        self.running.set()
        try:
            while True:
                try:
                    if recvmsg is None:
                        data, stamp = recv(READ_SIZE), None
                    else:
                        data, ancillary, _, _ = recvmsg(READ_SIZE, STAMP_SPACE)
                        stamp = stamp_of(ancillary)
                except TimeoutError:
                    continue  # the socket's own timeout; stalls are judged by the reader
                if not data:
                    break
                now = clock()
                # the kernel's time, where it is one: never later than now (clock steps)
                if stamp is None:
                    self.unstamped += 1
                times.append(min(now, stamp - wall_minus_mono) if stamp is not None else now)
                chunks.append(data)  # deque appends are atomic; the reader re-checks under cond
                if self.waiting:
                    with cond:
                        cond.notify()
                if data.endswith(b"0\r\n\r\n"):
                    self.settled.set()  # a hint only: http.client decides where the body ends
        except BaseException as exc:
            self.error = exc
        finally:
            self._ref.close()
            with cond:
                self.eof = True
                cond.notify_all()
            self.settled.set()

    @property
    def last_arrival(self) -> float:
        return self.times[-1] if self.times else self.started_at


STAMP_SPACE = socket.CMSG_SPACE(16) if hasattr(socket, "CMSG_SPACE") else 0
# Python's socket module does not name it: asm-generic/socket.h, SO_TIMESTAMPNS_OLD = 35, with a
# 64-bit struct timespec on 64-bit x86 and Arm (other architectures number it differently)
_SO_TIMESTAMPNS = getattr(socket, "SO_TIMESTAMPNS", None) or (
    35 if sys.platform == "linux" and platform.machine().lower() in ("x86_64", "amd64", "aarch64",
                                                                       "arm64") else None)


_STAMP_KEEPER: list[socket.socket] = []


def kernel_stamps(sock: Any) -> bool:
    """Ask the kernel to stamp received data (plain sockets on Linux); False where it cannot.

    The kernel turns receive stamping on for the whole stack when the first socket asks, through
    deferred work, so the first packets after that can arrive unstamped; and off again when the
    last such socket closes. One idle socket that asks, kept for the process's life, keeps it on
    between requests (a request's first token would otherwise often go unstamped)."""
    if _SO_TIMESTAMPNS is None or not STAMP_SPACE or type(sock) is not socket.socket:
        return False
    try:
        if not _STAMP_KEEPER:
            keeper = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            keeper.setsockopt(socket.SOL_SOCKET, _SO_TIMESTAMPNS, 1)
            _STAMP_KEEPER.append(keeper)
        sock.setsockopt(socket.SOL_SOCKET, _SO_TIMESTAMPNS, 1)
    except OSError:
        return False
    return True


_TIMESPEC = struct.Struct("qq")


def stamp_of(ancillary: list[tuple[int, int, bytes]]) -> float | None:
    """The wall-clock receive time in a ``recvmsg`` answer (a struct timespec), if any."""
    for level, kind, data in ancillary:
        if kind == _SO_TIMESTAMPNS and level == socket.SOL_SOCKET and len(data) >= 16:
            seconds, nanoseconds = _TIMESPEC.unpack_from(data)
            return seconds + nanoseconds * 1e-9  # type: ignore[no-any-return]
    return None


class ReceivedBytes(io.RawIOBase):
    """What http.client reads from: the receiver's chunks, with the stall timeout kept here."""

    def __init__(self, receiver: Receiver, timeout_s: float | None) -> None:
        super().__init__()
        self.receiver = receiver
        self.timeout_s = timeout_s
        self.taken = 0  # chunks handed out so far: bytes read now came with chunk ``taken``
        self._rest = b""

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        if not self._rest and self.receiver.chunks:  # after the stream: no lock, no wait
            self._rest = self.receiver.chunks.popleft()
            self.taken += 1
        if not self._rest:
            r = self.receiver
            with r.cond:
                r.waiting = True
                try:
                    while not r.chunks and not r.eof:
                        if not r.cond.wait(self.timeout_s):
                            raise TimeoutError(f"no data for {self.timeout_s:g} s")
                finally:
                    r.waiting = False
                if not r.chunks:
                    if r.error is not None and not isinstance(r.error, OSError):
                        raise r.error
                    return 0
                self._rest = r.chunks.popleft()
                self.taken += 1
        n = min(len(buffer), len(self._rest))
        buffer[:n] = self._rest[:n]
        self._rest = self._rest[n:]
        return n


class _StampedResponse(http.client.HTTPResponse):
    """http.client's response over the receiver's chunks; it registers itself on its
    connection (``conn.response``), where the stream reader finds it (urllib3 keeps it in a
    private attribute)."""

    def __init__(self, sock: Any, *args: Any, receiver: list[Receiver], owner: Stamped,
                 **kwargs: Any) -> None:
        super().__init__(sock, *args, **kwargs)
        owner.response = self
        self.fp.close()  # drops only this file's reference; the socket stays open
        if not receiver:  # https: started only now, never beside a write on the TLS socket
            receiver.append(Receiver(sock))
            receiver[0].start_reading()
        self.received = ReceivedBytes(receiver[0], sock.gettimeout())
        self.fp = io.BufferedReader(self.received)


class Stamped:
    """Mixin for urllib3 connections: a receiver thread, and when the request was sent."""

    sent_at = 0.0
    receiver: list[Receiver]
    response: _StampedResponse | None = None
    sock: Any

    def request(self, method: str, *args: Any, **kwargs: Any) -> None:
        self.receiver = []
        self.response = None
        if method == "POST" and not isinstance(self, HTTPSConnection):  # the streams
            if self.sock is None:
                self.connect()  # type: ignore[attr-defined]
            self.receiver.append(Receiver(self.sock))
            self.receiver[0].start_reading()
        # http.client builds the response with self.response_class(sock, method=...); small
        # GETs (health, metrics, info) keep the plain one: no thread, nothing to time
        stamped = functools.partial(_StampedResponse, receiver=self.receiver, owner=self)
        setattr(self, "response_class",  # noqa: B010 - the base classes type it differently
                stamped if method == "POST" else http.client.HTTPResponse)
        # stamped before the write: a sender the kernel preempts inside its send (a busy
        # machine) would otherwise stamp after the server has already answered
        self.sent_at = time.perf_counter()
        super().request(method, *args, **kwargs)  # type: ignore[misc]


class _HTTPConnection(Stamped, urllib3.connection.HTTPConnection):
    pass


class _HTTPSConnection(Stamped, urllib3.connection.HTTPSConnection):
    pass


class _HTTPPool(HTTPConnectionPool):
    ConnectionCls = _HTTPConnection


class _HTTPSPool(HTTPSConnectionPool):
    ConnectionCls = _HTTPSConnection


_POOLS = {"http": _HTTPPool, "https": _HTTPSPool}


class StampingAdapter(HTTPAdapter):
    def init_poolmanager(self, *args: Any, **kwargs: Any) -> None:
        super().init_poolmanager(*args, **kwargs)
        self.poolmanager.pool_classes_by_scheme = dict(_POOLS)

    def proxy_manager_for(self, proxy: str, **kwargs: Any) -> Any:
        manager = super().proxy_manager_for(proxy, **kwargs)
        manager.pool_classes_by_scheme = dict(_POOLS)
        return manager
