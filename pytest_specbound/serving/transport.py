"""A low-overhead streaming HTTP client on requests: record (arrival time, bytes), parse after.

The read loop does no parsing: it keeps the raw bytes of each ``read1`` (whatever size arrived,
transfer encoding already undone by urllib3), and the socket reader underneath http.client's
buffer notes the time of every socket read; bytes take the time of the socket read that brought
them. So the client spends microseconds per token, does not steal the CPU from a server on the same
machine, and never mistakes bytes taken from its own buffer for separate arrivals.
Server-sent events are split and decoded once the stream has ended; each event carries the arrival
time of the read that completed it.

Timeouts (connect, stall) are socket timeouts, so they fire alike on http and https. Proxies come
from ``HTTP_PROXY``/``HTTPS_PROXY``/``NO_PROXY`` with loopback always direct; TLS is verified with
the bundle named by the budget/flag, else ``REQUESTS_CA_BUNDLE``/``SSL_CERT_FILE``, else certifi.
"""

from __future__ import annotations

import contextlib
import copy
import http.client
import json
import os
import socket
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import requests
import urllib3

from pytest_specbound.errors import RequestError
from pytest_specbound.serving.sse import body_decoder, split_events
from pytest_specbound.serving.stamping import READ_SIZE, Receiver, StampingAdapter
from pytest_specbound.serving.stream_result import StreamResult
from pytest_specbound.serving.urls import is_loopback, split_url

RequestBody = dict[str, Any]  # a JSON request body, as written to the wire
CONNECT_TIMEOUT_S = 10.0
API_KEY_ENV = "SPECBOUND_API_KEY"
CA_BUNDLE_CHOICES = ("--specbound-ca-bundle or [server] ca_bundle (specbound measure: --ca-bundle), "
                     "or REQUESTS_CA_BUNDLE / SSL_CERT_FILE / SSL_CERT_DIR")


@dataclass(frozen=True)
class ApiKey:
    """An API key and the environment variable it came from: the variable is named in errors,
    the value never printed."""

    value: str | None = field(default=None, repr=False)
    variable: str = API_KEY_ENV

    def refused(self, status: int) -> str:
        """What to do about an HTTP 401/403, naming the variable."""
        choose = "[server] api_key_env / --api-key-env name another variable"
        if not self.value:
            return (f"the server wants an API key and none was sent: set {self.variable} "
                    f"({choose})")
        return f"the server refused the API key in {self.variable} (HTTP {status}): check it ({choose})"


class ConnectFailed(RequestError):
    """Nothing was sent: the connection could not be made (safe to retry once)."""


class Stalled(RequestError):
    """The server stopped sending for longer than the read timeout."""


class TLSFailed(RequestError):
    """The TLS handshake failed (a certificate that does not verify): waiting will not mend it."""


class HTTPStatusError(RequestError):
    """The server answered with a status other than 200."""

    def __init__(self, message: str, status: int) -> None:
        super().__init__(message)
        self.status = status


class Unauthorized(HTTPStatusError):
    """HTTP 401 or 403: the API key is missing or refused (waiting will not mend it)."""


class NotAStream(RequestError):
    """A 200 answer that is not an event stream (a gateway's page, a JSON body)."""


# -- where and how to connect ------------------------------------------------------------
def proxies_for(url: str) -> dict[str, str]:
    """Proxies from the environment for ``url``; loopback is never proxied."""
    _scheme, host, _port = split_url(url)
    if is_loopback(host):
        return {}
    return dict(requests.utils.get_environ_proxies(url))


def _verify_source(named: str | None) -> tuple[str | bool, str]:
    """What https is verified with, and how to say so in an error."""
    if named:
        return named, f"the CA bundle {named}"
    for variable in ("REQUESTS_CA_BUNDLE", "SSL_CERT_FILE", "SSL_CERT_DIR"):
        value = os.environ.get(variable)
        if value:
            return value, f"{variable}={value}"
    return True, "certifi's CA bundle"


def _session() -> requests.Session:
    session = requests.Session()
    session.trust_env = False  # proxies and CA bundle are resolved by the Endpoint, explicitly
    adapter = StampingAdapter()
    session.mount("http://", adapter)
    session.mount("https://", adapter)
    return session


class Endpoint:
    """One server base URL. Every request opens a fresh connection (no stale keep-alive)."""

    def __init__(self, base_url: str, api_key: ApiKey | str | None = None,
                 read_timeout_s: float = 120.0, ca_bundle: str | None = None,
                 connect_timeout_s: float = CONNECT_TIMEOUT_S, origin: str = "url"):
        self.base_url = base_url.rstrip("/")
        self.scheme, self.host, self.port = split_url(self.base_url, origin)
        self.key = api_key if isinstance(api_key, ApiKey) else ApiKey(api_key)
        self.api_key = self.key.value
        self.read_timeout_s = read_timeout_s
        self.connect_timeout_s = connect_timeout_s
        self.proxies = proxies_for(self.base_url)
        self.verify, self.verify_source = _verify_source(ca_bundle)
        self.session = _session()

    def clone(self) -> Endpoint:
        """The same server, settings and key, with a session of its own (one per thread:
        a requests.Session is not meant to be shared between threads)."""
        other = copy.copy(self)
        other.session = _session()
        return other

    @property
    def proxied(self) -> bool:
        return bool(self.proxies.get(self.scheme) or self.proxies.get("all"))

    def headers(self, stream: bool = False) -> dict[str, str]:
        h = {"Connection": "close", "Accept-Encoding": "identity"}
        if stream:
            h.update({"Content-Type": "application/json", "Accept": "text/event-stream"})
        if self.api_key:
            h["Authorization"] = f"Bearer {self.api_key}"
        return h

    def _redact(self, exc: RequestError) -> RequestError:
        if self.api_key and self.api_key in str(exc):
            exc.args = (str(exc).replace(self.api_key, "***"),)
        return exc

    def stream(self, path: str, body: RequestBody) -> StreamResult:
        """POST ``body`` and collect the SSE stream; failures raise :class:`RequestError`.

        Error texts never carry the API key, even when a server echoes it back.
        """
        try:
            return self._stream(path, body)
        except RequestError as exc:
            raise self._redact(exc) from None

    def _open(self, method: str, path: str, timeout: tuple[float, float], data: bytes | None,
              stream: bool) -> requests.Response:
        headers = self.headers(stream)
        if data is not None:  # every body is JSON (vLLM refuses one not labelled so: HTTP 400)
            headers["Content-Type"] = "application/json"
        try:
            return self.session.request(
                method, self.base_url + path, data=data, headers=headers,
                stream=True, timeout=timeout, proxies=self.proxies, verify=self.verify,
                allow_redirects=False)
        except requests.exceptions.ConnectTimeout:
            raise ConnectFailed(f"{method} {path}: connection failed: no answer from "
                                f"{self.host}:{self.port} within {timeout[0]:g} s") from None
        except requests.exceptions.ReadTimeout:
            raise Stalled(f"{method} {path}: stalled: no response headers within "
                          f"{timeout[1]:g} s (read timeout)") from None
        except requests.exceptions.SSLError as exc:
            raise TLSFailed(f"{method} {path}: TLS failed: {_why(exc)}; {self._tls_hint(exc)}"
                            ) from None
        except requests.exceptions.ConnectionError as exc:
            raise ConnectFailed(f"{method} {path}: connection failed: {_why(exc)}") from None
        except requests.exceptions.RequestException as exc:
            raise RequestError(f"{method} {path}: {_why(exc)}") from None

    def _tls_hint(self, exc: BaseException) -> str:
        why = _why(exc)
        if "WRONG_VERSION_NUMBER" in why or "record layer failure" in why:
            return f"the server at {self.host}:{self.port} does not speak TLS: use http://"
        if "VERIFY_FAILED" in why:
            return (f"its certificate does not verify against {self.verify_source}: name the "
                    f"bundle that signed it with {CA_BUNDLE_CHOICES}")
        return f"verified against {self.verify_source}"

    def refusal(self, method: str, path: str, status: int, headers: Mapping[str, str],
                body: str) -> HTTPStatusError | None:
        """The error for an answer that waiting will not mend (401/403, a redirect), else None."""
        if status in (401, 403):
            return Unauthorized(f"{method} {path}: HTTP {status}: {self.key.refused(status)}",
                                status)
        if status in (301, 302, 303, 307, 308):
            where = headers.get("location") or headers.get("Location") or "(no Location)"
            return HTTPStatusError(f"{method} {path}: HTTP {status}: redirected to {where}: point "
                                   "the URL there (a redirect is not followed: it would replay "
                                   "the request)", status)
        return None

    def _status_error(self, resp: requests.Response, path: str) -> HTTPStatusError:
        text = _error_text(resp.raw)[:300]
        refused = self.refusal("POST", path, resp.status_code, resp.headers, text)
        if refused is not None:
            return refused
        status = resp.status_code
        if status == 429:
            after = resp.headers.get("Retry-After")
            return HTTPStatusError(
                f"POST {path}: HTTP 429: rate-limited" + (f" (Retry-After: {after})" if after
                                                          else "")
                + f" by the server or a gateway in front of it: raise the limit for this client "
                  f"or attach to the server itself: {text}", status)
        return HTTPStatusError(f"POST {path}: HTTP {status}: {text}", status)

    def _release(self, resp: requests.Response) -> None:
        """Close the response and its connection: none is ever reused (a server that closes an
        idle keep-alive connection would fail the next request)."""
        conn = resp.raw.connection
        for receiver in getattr(conn, "receiver", []):
            if receiver.is_alive():  # close() would not wake a thread blocked in recv
                with contextlib.suppress(OSError):
                    receiver.sock.shutdown(socket.SHUT_RDWR)
        resp.close()
        self.session.close()

    def _stream(self, path: str, body: RequestBody) -> StreamResult:
        payload = json.dumps(body).encode()
        cpu_before = time.process_time()
        before = time.perf_counter()
        resp = self._open("POST", path, (self.connect_timeout_s, self.read_timeout_s), payload, True)
        raw = resp.raw
        conn = raw.connection
        sent = getattr(conn, "sent_at", 0.0) or before
        receivers: list[Receiver] = getattr(conn, "receiver", [])
        reads: list[tuple[int, bytes]] = []  # (socket reads so far, body bytes)
        try:
            if resp.status_code != 200:
                raise self._status_error(resp, path)
            result = StreamResult(sent_at=sent, headers={k.lower(): v for k, v in resp.headers.items()})
            _check_stream_type(result.headers, raw, path)
            decoded = body_decoder(result.headers.get("content-encoding"), path)
            if receivers:
                self._wait_settled(receivers[0], path)
            result.streaming_cpu_s = time.process_time() - cpu_before  # parsing comes after
            inner = getattr(conn, "response", None)  # http.client's: it undoes the chunking
            received = getattr(inner, "received", None)
            read1 = inner.read1 if inner is not None else raw.read1
            append = reads.append
            try:
                while True:
                    data = read1(READ_SIZE)
                    if not data:
                        break
                    if decoded is not None:
                        data = decoded(data)
                        if not data:
                            continue
                    append((received.taken if received else 0, data))
            except (urllib3.exceptions.ReadTimeoutError, TimeoutError):
                raise self._stalled(path, len(reads)) from None
            except (urllib3.exceptions.HTTPError, http.client.HTTPException, OSError) as exc:
                raise RequestError(f"POST {path}: stream broken after {len(reads)} reads: "
                                   f"{_why(exc)}") from None
        finally:
            self._release(resp)
        times = receivers[0].times if receivers else []
        result.kernel_stamped = bool(receivers) and receivers[0].kernel_stamps and \
            not receivers[0].unstamped
        timed = [(times[i - 1] if 0 < i <= len(times) else sent, i, data) for i, data in reads]
        split_events(timed, result)
        return result

    def _wait_settled(self, receiver: Receiver, path: str) -> None:
        """Sleep until the stream looks complete; no data for the read timeout is a stall."""
        while not receiver.settled.is_set():
            idle = time.perf_counter() - receiver.last_arrival
            if idle >= self.read_timeout_s:
                raise self._stalled(path, len(receiver.times))
            receiver.settled.wait(self.read_timeout_s - idle)

    def _stalled(self, path: str, reads: int) -> Stalled:
        return Stalled(f"POST {path}: stalled: no data for {self.read_timeout_s:g} s after "
                       f"{reads} reads (read timeout)")

    def post_json(self, path: str, body: RequestBody) -> Any:
        """One request answered whole (an earlier turn of a conversation): its JSON; an error
        status or a body that is not JSON raises :class:`RequestError`."""
        resp = self._open("POST", path, (self.connect_timeout_s, self.read_timeout_s),
                          json.dumps(body).encode(), False)
        try:
            if resp.status_code != 200:
                raise self._status_error(resp, path)
            return json.loads(resp.content)
        except ValueError:
            raise RequestError(f"POST {path}: the answer is not JSON") from None
        except requests.exceptions.RequestException as exc:
            raise RequestError(f"POST {path}: {_why(exc)}") from None
        finally:
            self._release(resp)

    def get(self, path: str, timeout_s: float = 5.0) -> tuple[int, bytes]:
        """A small GET (health, info, metrics): (status, body); connection errors raise."""
        status, body, _headers = self.get_with_headers(path, timeout_s)
        return status, body

    def get_with_headers(self, path: str, timeout_s: float = 5.0
                         ) -> tuple[int, bytes, dict[str, str]]:
        """:meth:`get` with the answer's headers (lower-case names)."""
        resp = self._open("GET", path, (min(timeout_s, self.connect_timeout_s), timeout_s), None,
                          False)
        try:
            return (resp.status_code, resp.content,
                    {k.lower(): v for k, v in resp.headers.items()})
        except requests.exceptions.RequestException as exc:
            raise RequestError(f"GET {path}: {_why(exc)}") from None
        finally:
            self._release(resp)

    def get_json(self, path: str, timeout_s: float = 5.0) -> Any:
        status, body = self.get(path, timeout_s)
        if status != 200:
            return None
        try:
            return json.loads(body)
        except ValueError:
            return None


def _check_stream_type(headers: Mapping[str, str], raw: Any, path: str) -> None:
    """A 200 answer that is a page or one JSON body, not an event stream, is named as such."""
    kind = headers.get("content-type", "").split(";")[0].strip().lower()
    if kind not in ("application/json", "text/html"):
        return
    text = _error_text(raw)
    if kind == "text/html":
        raise NotAStream(f"POST {path}: the answer is an HTML page (text/html), not an event "
                         f"stream: a gateway's page? {text[:160]}")
    raise NotAStream(f"POST {path}: the answer is one JSON body (application/json), not an event "
                     f"stream (stream=true dropped by a gateway?): {text[:200]}")


def _error_text(raw: Any) -> str:
    """Up to 2000 bytes of an error response body, as one line."""
    try:
        data = raw.read(2000, decode_content=True) or b""
    except (urllib3.exceptions.HTTPError, OSError):
        data = b""
    return bytes(data).decode("utf-8", "replace").strip().replace("\n", " ")


def _cause(exc: BaseException) -> BaseException | None:
    """What a requests/urllib3 exception wraps: its first argument, its reason, or its context."""
    if exc.args and isinstance(exc.args[0], BaseException):
        return exc.args[0]
    reason = getattr(exc, "reason", None)
    if isinstance(reason, BaseException):
        return reason
    if isinstance(exc, urllib3.exceptions.HTTPError):
        return exc.__context__
    return None


def _why(exc: BaseException) -> str:
    """The innermost useful cause of a requests/urllib3 exception, in one line."""
    inner = exc
    while (nxt := _cause(inner)) is not None and nxt is not inner:
        inner = nxt
    text = str(inner).replace("\n", " ")
    return f"{type(inner).__name__}: {text}" if text else type(inner).__name__
