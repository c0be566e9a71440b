"""Launch or attach to an inference server; readiness; teardown of the whole process group."""

from __future__ import annotations

import contextlib
import os
import shlex
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pytest_specbound import interrupts
from pytest_specbound.errors import PortTaken, RequestError, ServerError
from pytest_specbound.serving.exit_status import describe_exit, root_cause
from pytest_specbound.serving.transport import ApiKey, Endpoint, TLSFailed

DEFAULT_HOST = "127.0.0.1"
TAIL_LINES = 15
SAY_EVERY_S = 15.0
RESOLVE_TIMEOUT_S = 5.0


def check_resolves(endpoint: Endpoint, origin: str = "url") -> None:
    """Fail at once, naming the URL, when its host does not resolve (a proxy resolves for us)."""
    if endpoint.proxied:
        return
    import concurrent.futures

    pool = concurrent.futures.ThreadPoolExecutor(1)
    future = pool.submit(socket.getaddrinfo, endpoint.host, endpoint.port, 0, socket.SOCK_STREAM)
    try:
        future.result(RESOLVE_TIMEOUT_S)
    except concurrent.futures.TimeoutError:
        raise ServerError(f"{origin}={endpoint.base_url}: host '{endpoint.host}' did not resolve "
                          f"within {RESOLVE_TIMEOUT_S:g} s") from None
    except (socket.gaierror, UnicodeError) as exc:
        raise ServerError(f"{origin}={endpoint.base_url}: host '{endpoint.host}' does not resolve "
                          f"({exc})") from None
    finally:
        pool.shutdown(wait=False)


def free_port(host: str = DEFAULT_HOST) -> int:
    """A port the OS says is free right now on ``host``."""
    with socket.socket() as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def port_in_use(host: str, port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.5)
        return s.connect_ex((host, port)) == 0


def log_tail(path: Path, lines: int = TAIL_LINES, secret: str | None = None) -> str:
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""
    tail = " | ".join(ln.strip() for ln in text.splitlines()[-lines:] if ln.strip())
    return redact(tail, secret)


def group_members(pgid: int) -> list[int]:
    """Live (non-zombie) processes in process group ``pgid`` (Linux /proc; else best effort)."""
    proc = Path("/proc")
    if not proc.is_dir():
        try:
            os.killpg(pgid, 0)
            return [pgid]
        except (ProcessLookupError, PermissionError):
            return []
    members = []
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rfind(")") + 2:].split()
        if fields[0] != "Z" and int(fields[2]) == pgid:
            members.append(int(entry.name))
    return members


def redact(text: str, secret: str | None) -> str:
    return text.replace(secret, "***") if secret else text


def _die_with_parent() -> None:  # pragma: no cover - runs in the child
    """Child pre-exec: new session (own process group); SIGTERM when the parent dies."""
    os.setsid()
    if sys.platform.startswith("linux"):
        try:
            import ctypes

            ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
        except OSError:
            pass


@dataclass
class LaunchSpec:
    """What to start: argv (or a string split with shlex), placeholders, env and cwd."""

    command: str | Sequence[str]
    host: str = DEFAULT_HOST
    port: int | None = None
    env: Mapping[str, str] = field(default_factory=dict)
    cwd: str | None = None
    shell: bool = False
    placeholders: Mapping[str, str] = field(default_factory=dict)

    def argv(self, port: int) -> list[str] | str:
        values = {"host": self.host, "port": str(port), **self.placeholders}
        if self.shell:
            text = self.command if isinstance(self.command, str) else shlex.join(self.command)
            return fill(text, values)
        parts = shlex.split(self.command) if isinstance(self.command, str) else list(self.command)
        return [fill(p, values) for p in parts]


def fill(text: str, values: Mapping[str, str]) -> str:
    """``text`` with each ``{key}`` placeholder replaced by its value."""
    for key, value in values.items():
        text = text.replace("{" + key + "}", value)
    return text


class Server:
    """A server we launched (and own) or one we attached to by URL."""

    def __init__(self, endpoint: Endpoint, process: subprocess.Popen[bytes] | None = None,
                 log_path: Path | None = None, argv: list[str] | str | None = None) -> None:
        self.endpoint = endpoint
        self.process = process
        self.log_path = log_path
        self.argv = argv

    @property
    def url(self) -> str:
        return self.endpoint.base_url

    @property
    def owned(self) -> bool:
        return self.process is not None

    @classmethod
    def attach(cls, url: str, api_key: ApiKey | str | None = None, read_timeout_s: float = 120.0,
               ca_bundle: str | None = None, origin: str = "url") -> Server:
        return cls(Endpoint(url, api_key, read_timeout_s, ca_bundle, origin=origin))

    @classmethod
    def launch(cls, spec: LaunchSpec, log_dir: Path, api_key: ApiKey | str | None = None,
               read_timeout_s: float = 120.0, name: str = "server") -> Server:
        """Start ``spec`` in its own process group, logging to ``log_dir/NAME-PORT.log``."""
        if spec.port is not None and port_in_use(spec.host, spec.port):
            raise ServerError(
                f"port {spec.port} on {spec.host} is already in use: refusing to launch (or to "
                "talk to a server we did not start); leave the port out to get a free one"
            )
        port = spec.port or free_port(spec.host)
        argv = spec.argv(port)
        log_dir.mkdir(parents=True, exist_ok=True)
        log_path = log_dir / f"{name}-{port}.log"
        env = {**os.environ, **spec.env}
        with open(log_path, "wb") as log:
            try:
                process = subprocess.Popen(
                    argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                    env=env, cwd=spec.cwd, shell=spec.shell, preexec_fn=_die_with_parent,
                )
            except FileNotFoundError:
                first = argv if isinstance(argv, str) else argv[0]
                raise ServerError(f"launch command not found: {first!r} (server.launch)") from None
            except PermissionError:
                first = argv if isinstance(argv, str) else argv[0]
                raise ServerError(f"launch command is not executable: {first!r}") from None
        endpoint = Endpoint(f"http://{spec.host}:{port}", api_key, read_timeout_s)
        return cls(endpoint, process, log_path, argv)

    def wait_ready(self, paths: Sequence[str], timeout_s: float,
                   say: Callable[[str], None] | None = None) -> None:
        """Poll ``paths`` in order until each answers 200; fail fast if the process dies.

        Connection refused and HTTP 503 (a server still loading) are waited for; ``say`` gets
        what the server answered last and the time left, every 15 s (at once when attaching:
        a server we launched is expected to refuse for a while). What waiting cannot mend
        fails at once: a certificate that does not verify, HTTP 401/403, a redirect.
        """
        start = time.monotonic()
        deadline = start + timeout_s
        next_say = start + (SAY_EVERY_S if self.owned else 0.0)
        pending = list(paths)
        last = "no answer yet"
        while pending:
            interrupts.check()  # a Ctrl-C that landed in a finalizer, not lost
            self._check_alive()
            try:
                status, body, headers = self.endpoint.get_with_headers(pending[0], timeout_s=2.0)
            except TLSFailed as exc:
                raise ServerError(f"{self.url}: {exc}") from None
            except RequestError as exc:
                last = exc.reason
            else:
                if status == 200:
                    pending.pop(0)
                    continue
                text = body[:120].decode("utf-8", "replace").strip().replace("\n", " ")
                refused = self.endpoint.refusal("GET", pending[0], status, headers, text)
                if refused is not None:
                    raise ServerError(f"{self.url}: {refused}")
                last = f"HTTP {status}" + (f" {text}" if text else "")
            now = time.monotonic()
            if say is not None and now >= next_say:
                what = "launched server" if self.owned else "server"
                say(f"waiting for the {what} at {self.url}{pending[0]}: {last}; "
                    f"{max(0.0, deadline - now):.0f} s left of ready_timeout_s={timeout_s:g}")
                next_say = now + SAY_EVERY_S
            if now > deadline:
                tail = self._tail()
                raise ServerError(
                    f"server not ready after {timeout_s:g} s: {self.url}{pending[0]} answered "
                    f"{last}" + (f"; log {self.log_path}: {tail}" if tail else "")
                )
            time.sleep(0.1)
        self._check_alive()  # answered, but by our process? (a port race would show here)

    def _tail(self) -> str:
        key = self.endpoint.api_key
        return log_tail(self.log_path, secret=key) if self.log_path else ""

    def _check_alive(self) -> None:
        death = self.death("while starting")
        if death is None:
            return
        host, port = self.endpoint.host, self.endpoint.port
        if port_in_use(host, port):  # ours is gone, yet something answers there
            code = self.process.poll() if self.process else None
            raise PortTaken(f"port {port} on {host} was taken by another process while the "
                            f"server started (it exited with code {code}); log {self.log_path}: "
                            f"{self._tail() or '(empty)'}")
        raise ServerError(death)

    def log_cause(self) -> str | None:
        """The last exception or error line of a server we launched, from its log."""
        if self.log_path is None:
            return None
        try:
            text = self.log_path.read_text(encoding="utf-8", errors="replace")
        except OSError:
            return None
        cause = root_cause(text)
        return redact(cause, self.endpoint.api_key) if cause else None

    def death(self, when: str) -> str | None:
        """How a server we launched ended, in one line with its log's tail; None while it runs
        (or when we did not launch it)."""
        code = None if self.process is None else self.process.poll()
        if code is None:
            return None
        return (f"{describe_exit(code, self.argv, when)}; log {self.log_path}: "
                f"{self._tail() or '(empty)'}")

    def alive(self) -> bool:
        return self.process is None or self.process.poll() is None

    def stop(self, grace_s: float = 10.0) -> None:
        """SIGTERM the whole process group, wait ``grace_s``, then SIGKILL what is left."""
        if self.process is None:
            return
        pgid = self.process.pid
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pgid, signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.process.wait(timeout=grace_s)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pgid, signal.SIGKILL)  # stragglers in the group, even if the leader exited
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.process.wait(timeout=5)
        deadline = time.monotonic() + 5.0
        while group_members(pgid) and time.monotonic() < deadline:
            time.sleep(0.05)  # SIGKILL is asynchronous: wait until the kernel has them gone
        self.process = None

    def __enter__(self) -> Server:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop()


@dataclass(frozen=True)
class Readiness:
    """When a server is ready: each of ``paths`` answers 200 within ``timeout_s``; ``say`` hears
    what it answered meanwhile (see :meth:`Server.wait_ready`)."""

    paths: Sequence[str]
    timeout_s: float
    say: Callable[[str], None] | None = None


def start_server(spec: LaunchSpec, ready: Readiness, log_dir: Path,
                 api_key: ApiKey | str | None = None, read_timeout_s: float = 120.0,
                 name: str = "server", retries: int = 2) -> Server:
    """Launch and wait until ready; if a free port we chose was taken meanwhile, try another."""
    for attempt in range(retries + 1):
        server = Server.launch(spec, log_dir, api_key, read_timeout_s, name)
        try:
            server.wait_ready(ready.paths, ready.timeout_s, ready.say)
            return server
        except PortTaken:
            server.stop()
            if spec.port is None and attempt < retries:  # a port we chose: choose another
                continue
            raise
        except BaseException:
            server.stop()
            raise
    raise AssertionError("unreachable")
