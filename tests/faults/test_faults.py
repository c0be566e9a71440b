"""The fault matrix: each failure is a one-line diagnosis, nothing orphaned, nothing lost."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from pytest_specbound.atomic import write_json
from pytest_specbound.errors import ConfigError, ServerError
from pytest_specbound.measure.prompts import load_prompts
from pytest_specbound.measure.sampler import FixedCount, Sampler, Stopping, Workload, measure
from pytest_specbound.serving.backends import get_backend
from pytest_specbound.serving.backends.base import Prompt
from pytest_specbound.serving.server import LaunchSpec, Readiness, Server, start_server
from pytest_specbound.serving.transport import Endpoint
from tests.conftest import PYTESTER_INI
from tests.servers.fake import FakeServer, Script

ROOT = Path(__file__).resolve().parents[2]
FAKE = [sys.executable, "-m", "tests.servers.fake"]
ENV = {"PYTHONPATH": str(ROOT)}


def live_group(pgid: int) -> list[str]:
    ps = subprocess.run(["ps", "-e", "-o", "pid=,pgid=,stat="], capture_output=True, text=True)
    return [ln for ln in ps.stdout.splitlines()
            if ln.split()[1] == str(pgid) and not ln.split()[2].startswith("Z")]


# 1. launch command missing or exiting at once ------------------------------------------------
def test_missing_launch_command(tmp_path):
    t = time.monotonic()
    with pytest.raises(ServerError, match="launch command not found: 'no-such-server-xyz'"):
        start_server(LaunchSpec("no-such-server-xyz --port {port}"), Readiness(("/health",), 30), tmp_path)
    assert time.monotonic() - t < 1.0


def test_server_exiting_at_once_reports_code_and_log_tail(tmp_path):
    cmd = [sys.executable, "-c",
           "import sys; print('error: unknown argument: --draft-max'); sys.exit(3)"]
    t = time.monotonic()
    with pytest.raises(ServerError) as err:
        start_server(LaunchSpec(cmd), Readiness(("/health",), 30), tmp_path)
    assert time.monotonic() - t < 1.5
    msg = str(err.value)
    assert "exited with code 3 while starting" in msg and "unknown argument: --draft-max" in msg
    assert "\n" not in msg and str(tmp_path) in msg


def _dies_of_sigill(folder: Path, name: str) -> list[str]:
    """A program called ``name`` that starts as llama-server does and dies of an illegal
    instruction, as a build for another CPU does on its first quantized matmul."""
    program = folder / name
    program.write_text(f"#!{sys.executable}\nimport os, signal\n"
                       "print('llama threadpool init, n_threads = 2', flush=True)\n"
                       "os.kill(os.getpid(), signal.SIGILL)\n")
    program.chmod(0o755)
    return [str(program), "--port", "{port}"]


def test_a_server_killed_by_a_signal_is_named_by_it_with_its_likely_cause(tmp_path):
    with pytest.raises(ServerError) as err:
        start_server(LaunchSpec(_dies_of_sigill(tmp_path, "llama-server")), Readiness(("/health",), 30),
                     tmp_path)
    msg = str(err.value)
    assert msg.startswith("llama-server died of SIGILL (illegal instruction) while starting: "
                          "its build uses CPU instructions this host does not allow"), msg
    assert 'CMAKE_ARGS="-DGGML_NATIVE=OFF"' in msg and "llama threadpool init" in msg
    assert "\n" not in msg and "code -4" not in msg


def test_a_server_that_dies_of_a_signal_while_measured_is_named_in_the_class_error(pytester):
    launch = (f'launch = "{sys.executable} -m tests.servers.fake --family vllm --port {{port}} '
              '--fault sigill"')
    _pytester_budget(pytester, _budget(launch))
    result = pytester.runpytest("--specbound-hw=h100", "--specbound-samples=4",
                                "--specbound-json=r.json")
    out = result.stdout.str()
    assert result.ret == 1 and "Traceback" not in out, out
    needle = "tests.servers.fake died of SIGILL (illegal instruction) while it was measured"
    assert needle in out, out
    (r,) = json.loads((pytester.path / "r.json").read_text())["results"]
    assert r["verdict"] == "error" and any(needle in t for t in r["text"]), r["text"]


def test_the_cli_names_the_signal_too(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "pytest_specbound.cli", "measure", "--launch",
                           " ".join(_dies_of_sigill(tmp_path, "llama-server")), "--backend",
                           "llamacpp", "--log-dir", str(tmp_path / "logs")],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2, proc.stderr
    assert "llama-server died of SIGILL (illegal instruction) while starting" in proc.stderr
    assert "Traceback" not in proc.stderr and proc.stderr.count("\n") == 1, proc.stderr


# 2. never ready --------------------------------------------------------------------------------
def test_never_ready_names_url_and_log_tail(tmp_path):
    cmd = [*FAKE, "--family", "llamacpp", "--port", "{port}", "--ready-after-s", "60"]
    with pytest.raises(ServerError) as err:
        start_server(LaunchSpec(cmd, env=ENV), Readiness(("/health",), 2), tmp_path)
    msg = str(err.value)
    assert "server not ready after 2 s" in msg and "/health answered HTTP 503" in msg
    assert "fake llamacpp server listening" in msg


# 3-7. mid-stream failures ----------------------------------------------------------------------
@pytest.mark.parametrize(
    ("fault", "needle"),
    [
        ("die", "stream broken after"),
        ("stall", "stalled: no data for 1 s"),
        ("truncate", "truncated stream"),
        ("badjson", "malformed JSON in event"),
        ("http400", "HTTP 400"),
        ("http500", "HTTP 500"),
    ],
)
@pytest.mark.parametrize("family", ["vllm", "llamacpp", "sglang"])
def test_request_failures_are_recorded_with_cause(family, fault, needle):
    with FakeServer(family, Script(fault=fault, fault_after=3)) as srv:
        sampler = Sampler(Endpoint(srv.url, read_timeout_s=1.0), get_backend(family))
        m = measure(sampler, Workload([Prompt(text="x")], 41, warmup=0), Stopping(FixedCount(2)))
    assert len(m.failures) == 2 and not m.ok
    assert all(needle in (r.error or "") for r in m.failures), [r.error for r in m.failures]
    assert m.decode_tok_s is None  # never a silent low number


def test_connection_refused_is_retried_once_then_reported():
    port = _free_port()
    sampler = Sampler(Endpoint(f"http://127.0.0.1:{port}"), get_backend("vllm"))
    rec = sampler.one(Prompt(text="x"), 8)
    assert "connection failed" in rec.error and "Connection" in rec.error


# 8. wrong model --------------------------------------------------------------------------------
def _budget(server: str, served: str | None = "test-model", check: bool = True,
            classes: int = 1, min_efficiency: float = 0.05, extra: str = "") -> str:
    """A vLLM budget for llama-3.1-8b/eagle3:3 with ``classes`` chat classes."""
    served_line = f'served_name = "{served}"' if served else ""
    tables = "".join(f"""
[classes.c{i}]
prompts = "chat"
max_tokens = 41
accept = [3.5, 4.0]
min_efficiency = {min_efficiency}
{extra}""" for i in range(classes))
    return f"""
[model]
name = "llama-3.1-8b"
{served_line}
[speculative]
method = "eagle3"
steps = 3
[server]
backend = "vllm"
{server}
check_model = {"true" if check else "false"}
ready_timeout_s = 120
{tables}"""


def _pytester_budget(pytester, text):
    pytester.makeini(PYTESTER_INI)
    (pytester.path / "budgets").mkdir(exist_ok=True)
    (pytester.path / "budgets" / "g.toml").write_text(text)


def test_wrong_model_is_an_error_unless_opted_out(pytester):
    with FakeServer("vllm", Script(step_s=0.007, model="Qwen/Qwen3-8B")) as srv:
        _pytester_budget(pytester, _budget(f'url = "{srv.url}"', None))
        result = pytester.runpytest("--specbound-hw=h100", "--specbound-samples=4")
        assert result.ret == 1
        out = result.stdout.str()
        assert "wrong model behind the server" in out and "expects 'llama-3.1-8b'" in out
        assert "serves Qwen/Qwen3-8B" in out and "Traceback" not in out
        _pytester_budget(pytester, _budget(f'url = "{srv.url}"', None, check=False))
        pytester.runpytest("--specbound-hw=h100", "--specbound-samples=4").assert_outcomes(passed=1)


# 9. port taken ---------------------------------------------------------------------------------
def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_taken_port_is_refused_never_attached(tmp_path):
    with FakeServer("vllm") as other:
        port = int(other.url.rsplit(":", 1)[1])
        cmd = [*FAKE, "--family", "vllm", "--port", "{port}"]
        with pytest.raises(ServerError, match=f"port {port} on 127.0.0.1 is already in use"):
            start_server(LaunchSpec(cmd, port=port, env=ENV), Readiness(("/health",), 10), tmp_path)
        assert not other.requests  # we never talked to it


def test_auto_port_picks_a_free_one(tmp_path):
    server = start_server(LaunchSpec([*FAKE, "--family", "vllm", "--port", "{port}"], env=ENV),
                          Readiness(("/health",), 20), tmp_path)
    try:
        assert server.url.startswith("http://127.0.0.1:")
    finally:
        server.stop()


# A launch that loses its port: another process (outside the server's process group) binds the
# port the launcher chose, then the server exits as servers do when they cannot bind, once the
# thief says it holds the port (a fixed wait could lose that race on a loaded box). It holds
# the port for 30 s; its pid goes to a file so the test can end it.
PORT_THIEF = r"""
import os, subprocess, sys
port, marker, pids, mode = sys.argv[1:5]
if os.path.exists(marker):
    os.execv(sys.executable, [sys.executable, "-m", "tests.servers.fake", "--family", "vllm",
                              "--port", port])
hold = ("import socket, sys, time; s = socket.socket(); s.bind(('127.0.0.1', int(sys.argv[1])));"
        " s.listen(); print('bound', flush=True); time.sleep(30)")
thief = subprocess.Popen([sys.executable, "-c", hold, port], start_new_session=True,
                         stdout=subprocess.PIPE, text=True)
with open(pids, "a") as f:
    f.write(f"{thief.pid}\n")
if mode == "once":  # the next launch starts the real server
    open(marker, "w").close()
thief.stdout.readline()  # the port is taken (however long a loaded box takes to start it)
sys.exit("error: bind: address already in use")
"""


@pytest.fixture
def port_thief(tmp_path):
    """A launch command whose server loses its port: ``once``, or on every launch."""
    pids = tmp_path / "thieves"
    script = tmp_path / "thief.py"
    script.write_text(PORT_THIEF)
    yield lambda mode: [sys.executable, str(script), "{port}", str(tmp_path / "marker"),
                        str(pids), mode]
    for pid in (pids.read_text().split() if pids.exists() else []):
        with contextlib.suppress(ProcessLookupError):
            os.kill(int(pid), signal.SIGKILL)


def test_a_port_taken_while_the_server_started_is_retried_on_another(tmp_path, port_thief):
    server = start_server(LaunchSpec(port_thief("once"), env=ENV), Readiness(("/health",), 20), tmp_path)
    try:
        assert server.alive() and len(list(tmp_path.glob("server-*.log"))) == 2
    finally:
        server.stop()


def test_a_taken_port_after_all_retries_is_one_line(tmp_path, port_thief):
    from pytest_specbound.errors import PortTaken

    with pytest.raises(PortTaken, match=r"port \d+ on 127.0.0.1 was taken by another process "
                                        r"while the server started \(it exited with code 1\)"):
        start_server(LaunchSpec(port_thief("always"), env=ENV), Readiness(("/health",), 20), tmp_path)
    assert len(list(tmp_path.glob("server-*.log"))) == 3  # the launch and two retries


def test_a_server_that_cannot_bind_a_free_port_is_not_retried(tmp_path):
    """Nobody holds the port: the server's own failure, shown once (no retry on a log word)."""
    cmd = [sys.executable, "-c", "import sys; sys.exit('error: bind: address already in use')"]
    with pytest.raises(ServerError, match=r"python.* exited with code 1 while starting") as info:
        start_server(LaunchSpec(cmd, env=ENV), Readiness(("/health",), 20), tmp_path)
    assert type(info.value) is ServerError
    assert len(list(tmp_path.glob("server-*.log"))) == 1  # launched once


# 10. no accept statistics ----------------------------------------------------------------------
def test_no_accept_statistics_is_flagged_in_every_report(pytester):
    with FakeServer("vllm", Script(step_s=0.007, per_request_metrics=False,
                                   fault="nometrics")) as srv:
        _pytester_budget(pytester, _budget(f'url = "{srv.url}"'))
        result = pytester.runpytest("--specbound-hw=h100", "--specbound-samples=4",
                                    "--specbound-json=r.json")
    out = result.stdout.str()
    assert "(est.)" in out
    r = json.loads((pytester.path / "r.json").read_text())["results"][0]
    assert r["accept_source"] == "estimate" and "accept_estimated" in r["reasons"]


# 11. interrupts --------------------------------------------------------------------------------
def _interrupt_run(tmp_path: Path, sig: int, during: str) -> tuple[int, list[int], Path]:
    launches = tmp_path / "launches.txt"
    ready = "60" if during == "launch" else "0"
    launch = (f'launch = "{sys.executable} -m tests.servers.fake --family vllm --port {{port}} '
              f'--child --launches {launches} --ready-after-s {ready} --step-s 0.2"')
    budget = _budget(launch, min_efficiency=0.01, extra="samples = 50")
    (tmp_path / "budgets").mkdir()
    (tmp_path / "budgets" / "slow.toml").write_text(budget)
    proc = subprocess.Popen(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "--specbound-hw=h100",
         "--specbound-samples=50", "--specbound-min-samples=50", "--specbound-json=r.json",
         "budgets/slow.toml", "--rootdir", str(tmp_path)],
        cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(ROOT)},
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        # a shell's background job starts with SIGINT ignored, and Python keeps it so: give the
        # run the default disposition, as a terminal or a CI runner's cancel would find it
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    deadline = time.monotonic() + 60
    while not launches.is_file() and time.monotonic() < deadline:
        time.sleep(0.1)
    if during == "measure":  # wait until a measured request is on disk (partial results)
        results = tmp_path / "r.json"
        while time.monotonic() < deadline:
            if results.is_file() and json.loads(results.read_text())["results"][0]["samples"]:
                break
            time.sleep(0.1)
    else:
        time.sleep(0.5)
    proc.send_signal(sig)
    _out, _ = proc.communicate(timeout=60)
    pids = [int(x) for x in launches.read_text().split()]
    return proc.returncode, pids, tmp_path / "r.json"


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
@pytest.mark.parametrize("during", ["launch", "measure"])
def test_interrupt_stops_the_group_and_keeps_results(tmp_path, sig, during):
    code, pids, results = _interrupt_run(tmp_path, sig, during)
    assert code == pytest.ExitCode.INTERRUPTED
    for pid in pids:  # the server ran in its own group (pgid = pid), with a child of its own
        assert live_group(pid) == []
    if during == "measure":
        doc = json.loads(results.read_text())
        assert doc["partial"] is True
        (r,) = doc["results"]
        assert r["partial"] is True and r["samples"] >= 1 and r["requests"]


# 12. xdist: one server for all workers ---------------------------------------------------------
def test_xdist_workers_share_one_server(pytester, tmp_path, monkeypatch):
    pytest.importorskip("xdist")
    launches = tmp_path / "launches.txt"
    launch = (f'launch = "{sys.executable} -m tests.servers.fake --family vllm --port {{port}} '
              f'--launches {launches} --step-s 0.01"')
    _pytester_budget(pytester, _budget(launch, classes=4, min_efficiency=0.01))
    monkeypatch.setenv("PYTHONPATH", str(ROOT))
    result = pytester.runpytest_subprocess("-n", "4", "--specbound-hw=h100",
                                           "--specbound-samples=4", "--specbound-json=r.json")
    result.assert_outcomes(passed=4)
    pids = launches.read_text().split()
    assert len(pids) == 1
    assert live_group(int(pids[0])) == []
    doc = json.loads((pytester.path / "r.json").read_text())
    assert len(doc["results"]) == 4 and doc["partial"] is False


# 13. atomic results file -----------------------------------------------------------------------
def test_results_json_is_atomic(tmp_path, monkeypatch):
    target = tmp_path / "r.json"
    write_json(target, {"results": ["old"]})

    class Boom:
        def __str__(self) -> str:
            raise RuntimeError("disk full")

    with pytest.raises(RuntimeError):
        write_json(target, {"results": [Boom()]})
    assert json.loads(target.read_text()) == {"results": ["old"]}
    assert [p.name for p in tmp_path.iterdir()] == ["r.json"]  # no temp file left


# 14-15. bad inputs, one line each --------------------------------------------------------------
def test_prompt_jsonl_bad_line(tmp_path):
    f = tmp_path / "p.jsonl"
    f.write_text('{"prompt": "ok"}\n{"prompt": \n')
    with pytest.raises(ConfigError, match=r"p.jsonl:2: invalid JSON"):
        load_prompts(str(f))
    f.write_text('{"prompt": "ok"}\n{"text": "x"}\n')
    with pytest.raises(ConfigError, match=r"p.jsonl:2: unknown key 'text'; valid: prompt"):
        load_prompts(str(f))
    f.write_text('{"prompt": "ok", "max_tokens": 0}\n')
    with pytest.raises(ConfigError, match=r"p.jsonl:1: key 'max_tokens' must be a positive"):
        load_prompts(str(f))
    with pytest.raises(ConfigError, match="unknown prompt set; valid: coding, chat"):
        load_prompts("poems")


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (["roofline", "--hw", "h100x", "--model", "llama-2-7b"], "unknown hardware 'h100x'"),
        (["roofline", "--hw", "h100", "--model", "mistral-7b"], "unknown model; catalog:"),
        (["roofline", "--hw", "h100", "--model", "{cfg}"], "missing field 'num_hidden_layers'"),
    ],
)
def test_bad_inputs_one_line(tmp_path, argv, needle):
    cfg = tmp_path / "config.json"
    cfg.write_text('{"hidden_size": 64, "vocab_size": 10, "num_attention_heads": 2, '
                   '"intermediate_size": 128}')
    argv = [a.replace("{cfg}", str(cfg)) for a in argv]
    proc = subprocess.run([sys.executable, "-m", "pytest_specbound.cli", *argv],
                          capture_output=True, text=True)
    assert proc.returncode == 2 and needle in proc.stderr
    assert proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr


# 16. secrets -----------------------------------------------------------------------------------
def test_api_key_never_appears_in_any_output(pytester, monkeypatch):
    secret = "sk-specbound-test-5f3a9c"
    monkeypatch.setenv("SPECBOUND_API_KEY", secret)
    with FakeServer("vllm", Script(fault="http400")) as bad, \
            FakeServer("vllm", Script(step_s=0.007)) as good:
        pytester.makeini(PYTESTER_INI)
        (pytester.path / "budgets").mkdir()
        (pytester.path / "budgets" / "bad.toml").write_text(_budget(f'url = "{bad.url}"'))
        (pytester.path / "budgets" / "good.toml").write_text(_budget(f'url = "{good.url}"'))
        result = pytester.runpytest("--specbound-hw=h100", "--specbound-samples=4", "-v",
                                    "--specbound-json=out/r.json", "--junitxml=out/j.xml",
                                    "--specbound-benchmark-json=out/b.json")
        sent = [r["path"] for r in good.requests]
    assert sent  # the key was really used
    assert "(request auth: Bearer ***)" in result.stdout.str()  # the server echoed it; we hid it
    texts = [result.stdout.str(), result.stderr.str()]
    texts += [p.read_text(errors="replace") for p in pytester.path.rglob("*") if p.is_file()]
    assert all(secret not in t for t in texts)


# 17. loopback by default -----------------------------------------------------------------------
def test_launched_servers_bind_loopback_by_default(tmp_path):
    spec = LaunchSpec([*FAKE, "--family", "vllm", "--host", "{host}", "--port", "{port}"], env=ENV)
    assert spec.host == "127.0.0.1"
    server: Server = start_server(spec, Readiness(("/health",), 20), tmp_path)
    try:
        log = server.log_path.read_text()
        assert "listening on 127.0.0.1:" in log
    finally:
        server.stop()
