"""The HTTP transport as users meet it: TLS, proxies, IPv6, bad URLs, servers not ready yet."""

from __future__ import annotations

import socket
import time
from pathlib import Path

import pytest

from pytest_specbound.errors import ConfigError, RequestError, ServerError
from pytest_specbound.gate.pipeline.pool import ServerPool
from pytest_specbound.measure.sampler import Sampler
from pytest_specbound.serving.backends import get_backend
from pytest_specbound.serving.backends.base import Prompt
from pytest_specbound.serving.connect import ServerConfig, open_server
from pytest_specbound.serving.server import Server
from pytest_specbound.serving.transport import Endpoint, Stalled
from tests.servers.fake import FakeServer, Script
from tests.servers.proxy import ForwardProxy

PROMPT = Prompt(text="count to ten")


def test_https_stall_fires_at_the_read_timeout(certificate):
    with FakeServer("vllm", Script(fault="stall"), tls=certificate) as srv:
        endpoint = Endpoint(srv.url, read_timeout_s=1.0, ca_bundle=certificate[0])
        path, body = get_backend("vllm").build_request(PROMPT, 41, None)
        start = time.monotonic()
        with pytest.raises(Stalled, match="stalled: no data for 1 s"):
            endpoint.stream(path, body)
        assert time.monotonic() - start < 6  # the server sleeps 30 s: the timeout cut it short


def test_https_is_verified_and_measures_with_the_named_bundle(certificate, monkeypatch):
    with FakeServer("vllm", tls=certificate) as srv:
        monkeypatch.delenv("REQUESTS_CA_BUNDLE", raising=False)
        monkeypatch.delenv("SSL_CERT_FILE", raising=False)
        with pytest.raises(RequestError, match=r"TLS failed: .*CERTIFICATE_VERIFY_FAILED"):
            Endpoint(srv.url).get("/v1/models")
        monkeypatch.setenv("SSL_CERT_FILE", certificate[0])  # the environment's bundle is used
        assert Endpoint(srv.url).get("/v1/models")[0] == 200
        record = Sampler(Endpoint(srv.url, ca_bundle=certificate[0]), get_backend("vllm")).one(
            PROMPT, 41)
        assert record.ok and record.completion_tokens == 41 and record.decode_s > 0


def test_proxies_come_from_the_environment(monkeypatch):
    with FakeServer("vllm") as srv, ForwardProxy() as proxy:
        port = srv.url.rsplit(":", 1)[1]
        monkeypatch.setenv("HTTP_PROXY", proxy.url)
        monkeypatch.delenv("NO_PROXY", raising=False)
        monkeypatch.delenv("no_proxy", raising=False)
        remote = Endpoint(f"http://gpu-box.invalid:{port}")  # only the proxy can reach it
        record = Sampler(remote, get_backend("vllm")).one(PROMPT, 41)
        assert record.ok and record.completion_tokens == 41, record.error
        assert f"POST http://gpu-box.invalid:{port}/v1/completions" in proxy.seen
        monkeypatch.setenv("NO_PROXY", "gpu-box.invalid")
        assert Endpoint(f"http://gpu-box.invalid:{port}").proxies == {}


def test_a_proxy_that_has_exited_listens_no_more():
    """The test proxies' listening socket is shut, not only closed: a close from the main
    thread left its accept blocked, the port listening, and the next server given that port
    lost its first client to the stale proxy (a DCGM scrape answered with a router's page)."""
    import socket

    with ForwardProxy() as proxy:
        port = int(proxy.url.rsplit(":", 1)[1])
    assert not proxy.thread.is_alive()
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(("127.0.0.1", port), timeout=2).close()


def test_loopback_is_never_proxied(monkeypatch):
    with FakeServer("vllm") as srv:
        monkeypatch.setenv("HTTP_PROXY", "http://127.0.0.1:9")  # nothing listens there
        monkeypatch.setenv("ALL_PROXY", "http://127.0.0.1:9")
        assert Endpoint(srv.url).get("/v1/models")[0] == 200


def test_ipv6_literal_urls_work():
    try:
        srv = FakeServer("vllm", host="::1")
    except OSError:
        pytest.skip("this machine has no IPv6 loopback")
    with srv:
        assert srv.url.startswith("http://[::1]:")
        record = Sampler(Endpoint(srv.url), get_backend("vllm")).one(PROMPT, 41)
        assert record.ok and record.completion_tokens == 41


@pytest.mark.parametrize("url", ["ftp://127.0.0.1:8000", "127.0.0.1:8000", "http://:80"])
def test_a_url_that_is_not_http_is_a_one_line_error(url):
    with pytest.raises(ConfigError, match=r"--specbound-url=.*: expected http://HOST:PORT"):
        Endpoint(url, origin="--specbound-url")


def test_an_unresolvable_host_fails_fast_naming_the_url(tmp_path):
    cfg = ServerConfig(backend="vllm", url="http://no-such-host.invalid:8000",
                       origin="budgets/b.toml:7: server.url")
    start = time.monotonic()
    with pytest.raises(ServerError, match=r"^budgets/b.toml:7: server.url=http://no-such-host"
                                          r"\.invalid:8000: host 'no-such-host.invalid' does not"):
        open_server(cfg, tmp_path)
    assert time.monotonic() - start <= 5


def test_a_refused_connection_is_waited_for_with_lines(tmp_path, monkeypatch):
    monkeypatch.setattr("pytest_specbound.serving.server.SAY_EVERY_S", 0.5)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # bound, not listening: connections are refused
        said: list[str] = []
        server = Server.attach(f"http://127.0.0.1:{port}")
        with pytest.raises(ServerError, match=r"not ready after 1\.6 s"):
            server.wait_ready(("/health",), 1.6, said.append)
    assert len(said) >= 3
    assert said[0].startswith(f"waiting for the server at http://127.0.0.1:{port}/health: ")
    assert "Connection refused" in said[0] and "s left of ready_timeout_s=1.6" in said[0]


def test_a_503_is_waited_for_and_named(tmp_path):
    with FakeServer("llamacpp", Script(ready_after_s=1.0)) as srv:
        said: list[str] = []
        server = Server.attach(srv.url)
        server.wait_ready(("/health",), 30, said.append)
    assert said and "HTTP 503" in said[0] and "Loading model" in said[0]


def test_a_failed_launch_is_not_tried_again_in_the_session(tmp_path):
    marker = tmp_path / "launches"
    cfg = ServerConfig(backend="vllm", launch=f"sh -c 'echo x >> {marker}; exit 3'",
                       ready_timeout_s=30)
    pool = ServerPool(tmp_path / "logs")
    with pytest.raises(ServerError, match="exited with code 3"):
        pool.get(cfg)
    start = time.monotonic()
    with pytest.raises(ServerError, match=r"exited with code 3.*not retried"):
        pool.get(cfg)
    assert time.monotonic() - start < 1
    assert Path(marker).read_text().count("x") == 1


def test_reads_carry_the_kernel_s_arrival_time_not_the_reader_s():
    """A reader that runs late (waiting for the GIL or the CPU) gets the time the bytes arrived."""
    from pytest_specbound.serving import stamping as transport

    listener = socket.create_server(("127.0.0.1", 0))
    client = socket.create_connection(listener.getsockname())
    server, _ = listener.accept()
    try:
        if not transport.kernel_stamps(client):
            pytest.skip("no SO_TIMESTAMPNS on this platform")
        time.sleep(0.05)  # the kernel turns stamping on through deferred work (first use only)
        server.sendall(b"token")
        sent = time.time()
        time.sleep(0.05)  # the reader is late
        data, ancillary, _, _ = client.recvmsg(64, transport.STAMP_SPACE)
        read = time.time()
        stamp = transport.stamp_of(ancillary)
        assert data == b"token" and stamp is not None
        assert abs(stamp - sent) < 0.01 and read - stamp > 0.04
    finally:
        for s in (client, server, listener):
            s.close()
