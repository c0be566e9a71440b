"""The edges of a deployment: what a gateway, a proxy, an editor or a launcher does to a run.

Each is measured right or named in one line that says what to change; never a hang, a traceback
or a number that is silently wrong. docs/faults.md lists them with what the user sees.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from pytest_specbound.errors import ConfigError, RequestError, ServerError
from pytest_specbound.gate.schema.budget import load_budget
from pytest_specbound.gate.schema.settings import resolve
from pytest_specbound.measure.sampler import FixedCount, Sampler, Stopping, Workload, measure, untimed_reason
from pytest_specbound.serving.backends import get_backend
from pytest_specbound.serving.backends.base import Prompt
from pytest_specbound.serving.connect import ServerConfig, open_server
from pytest_specbound.serving.records import RequestRecord
from pytest_specbound.serving.server import LaunchSpec, Readiness, start_server
from pytest_specbound.serving.transport import Endpoint
from tests.conftest import PYTESTER_INI
from tests.servers.fake import FakeServer, Script

ROOT = Path(__file__).resolve().parents[2]
PROMPT = Prompt(text="count to ten")
FAST_FAIL_S = 5.0  # what waiting cannot mend fails within this, not after ready_timeout_s


def _open_fails_fast(cfg: ServerConfig, tmp_path: Path) -> str:
    start = time.monotonic()
    with pytest.raises(ServerError) as err:
        open_server(cfg, tmp_path)
    assert time.monotonic() - start < FAST_FAIL_S
    text = str(err.value)
    assert "\n" not in text
    return text


# 1. TLS --------------------------------------------------------------------------------------------
def test_a_certificate_that_does_not_verify_fails_at_once_naming_the_bundle_options(
        certificate, tmp_path, monkeypatch):
    for variable in ("REQUESTS_CA_BUNDLE", "SSL_CERT_FILE", "SSL_CERT_DIR"):
        monkeypatch.delenv(variable, raising=False)
    with FakeServer("vllm", tls=certificate) as srv:
        text = _open_fails_fast(ServerConfig(backend="vllm", url=srv.url, ready_timeout_s=900),
                                tmp_path)
    assert "CERTIFICATE_VERIFY_FAILED" in text and "certifi's CA bundle" in text
    assert "--specbound-ca-bundle" in text and "SSL_CERT_FILE" in text
    assert "waiting" not in text


@pytest.mark.parametrize("variable", ["SSL_CERT_FILE", "REQUESTS_CA_BUNDLE"])
def test_the_environments_ca_bundle_is_honoured_and_named(certificate, tmp_path, monkeypatch,
                                                          variable):
    for name in ("REQUESTS_CA_BUNDLE", "SSL_CERT_FILE", "SSL_CERT_DIR"):
        monkeypatch.delenv(name, raising=False)
    other = tmp_path / "other.pem"  # a bundle that did not sign the server's certificate
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
                    "-subj", "/CN=other", "-keyout", str(tmp_path / "k.pem"), "-out", str(other)],
                   check=True, capture_output=True)
    with FakeServer("vllm", tls=certificate) as srv:
        monkeypatch.setenv(variable, certificate[0])
        server, _backend = open_server(ServerConfig(backend="vllm", url=srv.url), tmp_path)
        record = Sampler(server.endpoint, get_backend("vllm")).one(PROMPT, 41)
        assert record.ok and record.completion_tokens == 41
        monkeypatch.setenv(variable, str(other))
        text = _open_fails_fast(ServerConfig(backend="vllm", url=srv.url), tmp_path)
    assert f"{variable}={other}" in text


def test_https_to_a_plain_http_server_says_so(tmp_path):
    with FakeServer("vllm") as srv:
        url = srv.url.replace("http://", "https://")
        text = _open_fails_fast(ServerConfig(backend="vllm", url=url), tmp_path)
    assert "does not speak TLS: use http://" in text


# 2. 401 / 403 --------------------------------------------------------------------------------------
@pytest.mark.parametrize("auth_all", [False, True], ids=["vllm-api-key", "gateway"])
def test_a_server_that_wants_a_key_fails_at_once_naming_the_variable(tmp_path, monkeypatch,
                                                                     auth_all):
    monkeypatch.delenv("SPECBOUND_API_KEY", raising=False)
    with FakeServer("vllm", Script(api_key="sk-right-4d1f", auth_all=auth_all)) as srv:
        text = _open_fails_fast(ServerConfig(backend="vllm", url=srv.url), tmp_path)
        assert "HTTP 401" in text and "none was sent: set SPECBOUND_API_KEY" in text
        monkeypatch.setenv("TEAM_KEY", "sk-wrong-77aa")
        text = _open_fails_fast(ServerConfig(backend="vllm", url=srv.url,
                                             api_key_env="TEAM_KEY"), tmp_path)
        assert "refused the API key in TEAM_KEY" in text and "sk-wrong" not in text
        monkeypatch.setenv("TEAM_KEY", "sk-right-4d1f")
        server, _ = open_server(ServerConfig(backend="vllm", url=srv.url, api_key_env="TEAM_KEY"),
                                tmp_path)
        assert Sampler(server.endpoint, get_backend("vllm")).one(PROMPT, 41).ok


def test_a_stream_refused_for_its_key_names_the_variable():
    with FakeServer("vllm", Script(api_key="sk-x")) as srv:
        record = Sampler(Endpoint(srv.url), get_backend("vllm")).one(PROMPT, 41)
    assert "HTTP 401" in (record.error or "") and "SPECBOUND_API_KEY" in (record.error or "")


# 3. compression ------------------------------------------------------------------------------------
def test_streams_are_requested_uncompressed():
    with FakeServer("vllm") as srv:
        Sampler(Endpoint(srv.url), get_backend("vllm")).one(PROMPT, 41)
        headers = srv.requests[-1]["headers"]
    assert headers.get("Accept-Encoding") == "identity"


@pytest.mark.parametrize("encoding", ["gzip", "deflate"])
def test_a_gateway_that_compresses_anyway_is_decoded_read_by_read(encoding):
    # events 50 ms apart: a reader descheduled for 10 ms on a loaded box would merge two
    with FakeServer("vllm", Script(encoding=encoding, step_s=0.05)) as srv:
        m = measure(Sampler(Endpoint(srv.url), get_backend("vllm"), max_accept=4),
                    Workload([PROMPT], 41, warmup=0), Stopping(FixedCount(3)))
    assert not m.failures and not m.untimed, [r.error for r in m.failures]
    for r in m.records:  # each event still has its own arrival: 10 steps, 10 decode reads
        assert r.completion_tokens == 41 and r.decode_reads == 10 and r.clock == "client"


def test_an_encoding_that_cannot_be_decoded_is_named():
    with FakeServer("vllm", Script(encoding="br")) as srv:
        record = Sampler(Endpoint(srv.url), get_backend("vllm")).one(PROMPT, 41)
    assert "compressed as 'br' (Content-Encoding)" in (record.error or "")
    assert "gzip, x-gzip, deflate" in (record.error or "")


# 4. several tokens per event -----------------------------------------------------------------------
SPECULATIVE = [3, 1, 4, 2, 4, 1, 3, 4, 2, 3, 4, 1]  # tokens per verify step, accept <= 4
PLAIN = [1] * 24


@pytest.mark.parametrize("interval", [2, 4, 8])
@pytest.mark.parametrize(("steps", "max_accept"), [(SPECULATIVE, 4), (PLAIN, 1)],
                         ids=["speculative", "plain"])
@pytest.mark.parametrize("family", ["vllm", "sglang"])
def test_a_stream_interval_is_timed_per_event_and_never_blamed_on_the_client(
        family, steps, max_accept, interval):
    step_s = 0.008
    script = Script(steps=steps, step_s=step_s, stream_interval=interval)
    with FakeServer(family, script) as srv:
        m = measure(Sampler(Endpoint(srv.url), get_backend(family), max_accept=max_accept),
                    Workload([PROMPT], 99, warmup=0), Stopping(FixedCount(3)))
    assert not m.failures and not m.untimed, m.untimed_note()
    decode = sum(steps)
    for r in m.records:
        assert r.clock == "client" and r.untimed is None
        assert r.decode_tokens == decode
        assert r.decode_s >= 0.9 * len(steps) * step_s  # each event timed as it arrived
        if max(r.chunk_tokens[1:]) > max_accept:
            assert r.tokens_per_event is not None
    assert m.chunked_note() is not None


def _record(tokens: list[int], reads: list[int], kernel: bool = False) -> RequestRecord:
    times = tuple(0.01 + 0.005 * r for r in reads)
    return RequestRecord(completion_tokens=sum(tokens), ttft_s=times[0],
                         decode_s=times[-1] - times[0], chunk_times_s=times,
                         chunk_tokens=tuple(tokens), chunk_reads=tuple(reads),
                         kernel_stamped=kernel)


def _with_chunk(record: RequestRecord, max_accept: int) -> RequestRecord:
    from dataclasses import replace

    from pytest_specbound.measure.sampler import server_chunk

    return replace(record, tokens_per_event=server_chunk(record, max_accept))


@pytest.mark.parametrize("interval", [2, 4, 8])
def test_regular_chunks_read_one_per_read_are_the_servers(interval):
    """vLLM --stream-interval N with n-gram:3: events of N to N+3 tokens, one per read."""
    events = [1] + [interval + (i % 4) for i in range(12)] + [2]
    record = _with_chunk(_record(events, list(range(1, len(events) + 1))), 4)
    assert record.tokens_per_event == max(max(events), interval + 3)
    assert untimed_reason(record, 4) is None


def test_a_client_that_fell_behind_is_still_told_apart():
    """Irregular gaps, then a burst: reads that each merged several of the server's writes."""
    events = [1] + [4] * 24
    reads = [1] + [2 + i // 6 for i in range(24)]  # six events to a read: 24 tokens a read
    record = _with_chunk(_record(events, reads), 4)
    assert record.tokens_per_event is None
    assert "the client was not running" in (untimed_reason(record, 4) or "")


def test_a_response_buffered_whole_is_not_a_stream_interval():
    record = _with_chunk(_record([1, 95], [1, 2]), 4)  # one event carrying the whole decode
    assert record.tokens_per_event is None
    assert "95 decode tokens arrived in 1 socket read" in (untimed_reason(record, 4) or "")


def test_kernel_stamped_reads_time_a_decode_whose_middle_merged():
    """The kernel stamps each read with its newest bytes' arrival: merged reads mid-stream move
    neither end of the decode. A first read that swallowed most of it is still untimed."""
    events = [1] + [4] * 24
    reads = [1] + [2 + i // 6 for i in range(24)]
    assert untimed_reason(_record(events, reads, kernel=True), 4) is None
    swallowed = _record([1] + [4] * 24, [1] * 20 + [2, 3, 4, 5, 6], kernel=True)
    assert "arrived in the first token's socket read" in (untimed_reason(swallowed, 4) or "")


# 5. editors ----------------------------------------------------------------------------------------
BUDGET = """[model]
name = "llama-3.1-8b"
[speculative]
method = "eagle3"
steps = 3
[server]
backend = "vllm"
url = "http://127.0.0.1:9"
[classes.chat]
prompts = "chat"
accept = [3.5, 4.0]
min_efficiency = 0.5
"""


@pytest.mark.parametrize("encoding", ["utf-8-sig", "utf-16"])
def test_a_budget_saved_with_a_byte_order_mark_loads(tmp_path, encoding):
    path = tmp_path / "b.toml"
    path.write_bytes(BUDGET.replace("\n", "\r\n").encode(encoding))  # and Windows line ends
    assert list(load_budget(path).classes) == ["chat"]


def test_a_budget_in_another_encoding_is_one_line(tmp_path):
    path = tmp_path / "b.toml"
    path.write_bytes(BUDGET.replace("chat", "caf\xe9").encode("latin-1"))
    with pytest.raises(ConfigError, match=r"b.toml: not UTF-8 text \(byte \d+: b'\\xe9'\): save it "
                                          r"as UTF-8"):
        load_budget(path)


def test_a_prompt_file_with_a_byte_order_mark_loads(tmp_path):
    from pytest_specbound.measure.prompts import load_prompts

    path = tmp_path / "p.jsonl"
    path.write_bytes('{"prompt": "hello"}\n'.encode("utf-8-sig"))
    assert [p.text for p in load_prompts(str(path))] == ["hello"]


# 6. output paths -----------------------------------------------------------------------------------
@pytest.mark.parametrize("option", ["specbound_json", "specbound_benchmark_json", "specbound_plot"])
def test_an_output_path_that_cannot_be_written_is_refused_at_start(tmp_path, option):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    flag = "--" + option.replace("_", "-")
    with pytest.raises(ConfigError, match=rf"^{flag}=.*a-file/out/r.json: cannot create the "
                                          r"folder .*a-file is a file$"):
        resolve({option: str(blocker / "out" / "r.json")}, {}, lambda name: None)
    with pytest.raises(ConfigError, match=r"is a folder; name a file in it"):
        resolve({option: str(tmp_path)}, {}, lambda name: None)
    assert resolve({option: str(tmp_path / "new" / "r.json")}, {}, lambda name: None)
    assert (tmp_path / "new").is_dir() and not list((tmp_path / "new").iterdir())  # tried, left


@pytest.mark.skipif(not Path("/proc/self").is_dir(), reason="needs /proc")
def test_a_path_no_one_can_create_is_refused_even_as_root():
    """Under /proc the permission bits let root write; creating a file there fails."""
    with pytest.raises(ConfigError, match=r"^--specbound-json=/proc/specbound/r\.json: cannot "
                                          r"write the folder /proc/specbound: "):
        resolve({"specbound_json": "/proc/specbound/r.json"}, {}, lambda name: None)


def test_a_run_with_an_unwritable_results_path_measures_nothing(pytester, monkeypatch):
    monkeypatch.setenv("PYTHONPATH", str(ROOT))
    pytester.makeini(PYTESTER_INI)
    with FakeServer("vllm", Script(step_s=0.007)) as srv:
        (pytester.path / "budgets").mkdir()
        (pytester.path / "budgets" / "b.toml").write_text(
            BUDGET.replace("http://127.0.0.1:9", srv.url))
        (pytester.path / "blocker").write_text("")
        result = pytester.runpytest_subprocess("--specbound-hw=h100",
                                               "--specbound-json=blocker/r.json")
        assert srv.requests == []  # refused before any measurement
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    err = result.stderr.str()
    assert "--specbound-json=blocker/r.json: cannot create the folder blocker" in err
    assert "Traceback" not in err + result.stdout.str()


def test_under_q_the_waiting_lines_of_an_attached_server_still_show(pytester, monkeypatch):
    """An attached server that refuses connections is waited for up to ready_timeout_s: the
    user sees why under -q (before, minutes of silence); -qq hides the lines."""
    import socket

    monkeypatch.setenv("PYTHONPATH", str(ROOT))
    pytester.makeini(PYTESTER_INI)
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    (pytester.path / "budgets").mkdir()
    (pytester.path / "budgets" / "b.toml").write_text(BUDGET.replace(
        'url = "http://127.0.0.1:9"', f'url = "http://127.0.0.1:{port}"\nready_timeout_s = 2'))
    quiet = pytester.runpytest_subprocess("--specbound-hw=h100", "-q", "budgets")
    out = quiet.stdout.str()
    assert f"specbound: waiting for the server at http://127.0.0.1:{port}" in out, out
    assert "s left of ready_timeout_s=2" in out and "server not ready after 2 s" in out
    quieter = pytester.runpytest_subprocess("--specbound-hw=h100", "-qq", "budgets")
    assert "specbound: waiting for the server" not in quieter.stdout.str()


# 7. the last line names the failure ----------------------------------------------------------------
def test_measure_ends_naming_what_failed():
    with FakeServer("vllm", Script(fault="streamerror", fault_after=3)) as srv:
        proc = subprocess.run([sys.executable, "-m", "pytest_specbound.cli", "measure", "--url",
                               srv.url, "--backend", "vllm", "--samples", "3", "--warmup", "0"],
                              capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("specbound: error: 3 of 3 requests failed: server error in stream: "
                           "CUDA out of memory"), last


# 8. a launch's first refusals ----------------------------------------------------------------------
def test_a_launched_server_is_waited_for_quietly_at_first(tmp_path):
    said: list[str] = []
    cmd = [sys.executable, "-m", "tests.servers.fake", "--family", "vllm", "--port", "{port}",
           "--ready-after-s", "1"]
    server = start_server(LaunchSpec(cmd, env={"PYTHONPATH": str(ROOT)}),
                          Readiness(("/health",), 30, say=said.append), tmp_path)
    server.stop()
    assert said == []  # a launch refuses, then answers 503, for a while: nothing to report yet


# past the list: what else stands between the client and the server --------------------------------
@pytest.mark.parametrize(("fault", "needle"), [
    ("redirect", "HTTP 307: redirected to https://gateway.example/v1/completions: point the URL "
                 "there"),
    ("ratelimit", "HTTP 429: rate-limited (Retry-After: 30) by the server or a gateway"),
    ("json200", "the answer is one JSON body (application/json), not an event stream"),
    ("html200", "the answer is an HTML page (text/html), not an event stream: a gateway's page? "
                "<html><head><title>Sign in"),
])
def test_a_gateways_answer_instead_of_a_stream_is_named(fault, needle):
    with FakeServer("vllm", Script(fault=fault)) as srv:
        record = Sampler(Endpoint(srv.url), get_backend("vllm")).one(PROMPT, 41)
    assert needle in (record.error or ""), record.error


def test_a_redirected_health_check_fails_at_once(tmp_path):
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
    from threading import Thread

    class Redirect(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(301)
            self.send_header("Location", "https://login.example/")
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Redirect)
    Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        text = _open_fails_fast(ServerConfig(backend="vllm", url=f"http://127.0.0.1:"
                                             f"{httpd.server_address[1]}"), tmp_path)
    finally:
        httpd.shutdown()
    assert "HTTP 301: redirected to https://login.example/" in text


def test_a_request_error_keeps_its_reason_without_the_request_line():
    assert RequestError("GET /health: connection failed: refused").reason == \
        "connection failed: refused"
    assert RequestError("truncated stream: 0 events").reason == "truncated stream: 0 events"
