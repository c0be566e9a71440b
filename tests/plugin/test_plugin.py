"""The plugin through pytester: options, collection, markers, verdicts, reports."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET

import pytest

from tests.plugin.conftest import budget_text


def write_budget(pytester, text, name="budgets/gate.toml"):
    path = pytester.path / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


# -- options -----------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--specbound-hw=a6000y2"], "--specbound-hw=a6000y2: unknown hardware 'a6000y2'"),
        (["--specbound-samples=0"], "--specbound-samples=0: expected a whole number >= 1"),
        (["--specbound-samples=many"], "--specbound-samples=many: expected a whole number"),
        (["--specbound-confidence=1.5"], "--specbound-confidence=1.5: expected a number in (0, 1)"),
        (["--specbound-max-seconds=-2"], "--specbound-max-seconds=-2: expected a number > 0"),
        (["--specbound-inconclusive=maybe"], "--specbound-inconclusive=maybe: valid: fail, pass, skip"),
        (["--specbound-url=localhost:8000"], "--specbound-url=localhost:8000: expected http://"),
        (["--specbound-backend=ollama"], "--specbound-backend=ollama: unknown backend; valid: sglang"),
    ],
)
def test_bad_option_is_usage_error(pytester_env, args, needle):
    result = pytester_env.runpytest(*args)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    err = result.stderr.str()
    assert needle in err and "Traceback" not in err


def test_env_and_ini_are_validated_with_their_origin(pytester_env, monkeypatch):
    monkeypatch.setenv("SPECBOUND_CONFIDENCE", "7")
    result = pytester_env.runpytest()
    assert "SPECBOUND_CONFIDENCE (environment)=7" in result.stderr.str()
    monkeypatch.delenv("SPECBOUND_CONFIDENCE")
    pytester_env.makeini("[pytest]\nspecbound_samples = x\n")
    assert "specbound_samples (ini)=x" in pytester_env.runpytest().stderr.str()


def test_cli_beats_env_beats_ini(pytester_env, monkeypatch):
    pytester_env.makeini("[pytest]\nspecbound_samples = 3\n")
    pytester_env.makeconftest("""
def pytest_sessionstart(session):
    s = session.config.pluginmanager.get_plugin("specbound-session").settings
    print("SAMPLES", s.samples)
""")
    assert "SAMPLES 3" in pytester_env.runpytest("-s").stdout.str()
    monkeypatch.setenv("SPECBOUND_SAMPLES", "5")
    assert "SAMPLES 5" in pytester_env.runpytest("-s").stdout.str()
    assert "SAMPLES 7" in pytester_env.runpytest("-s", "--specbound-samples=7").stdout.str()


HEADER = ("platform ", "cachedir:", "rootdir:", "configfile:", "plugins:", "testpaths:")


def test_plugin_changes_nothing_for_other_projects(pytester_env, monkeypatch):
    # run from a folder named like a default clone of this repository: the header's paths then
    # contain the word, and only what the plugin itself prints may be checked
    project = pytester_env.mkdir("pytest-specbound")
    (project / "test_plain.py").write_text("def test_plain():\n    assert True\n")
    (project / "data.toml").write_text("[x]\ny = 1\n")
    (project / "pytest.ini").write_text("[pytest]\naddopts = -p no:cacheprovider\n")
    monkeypatch.chdir(project)
    result = pytester_env.runpytest("-v", str(project))
    result.assert_outcomes(passed=1)
    lines = result.stdout.lines
    assert any(ln.startswith("rootdir:") and "pytest-specbound" in ln for ln in lines)
    body = [ln for ln in lines if not ln.startswith(HEADER)]
    assert not [ln for ln in body if "specbound" in ln]


def test_help_lists_options(pytester_env):
    out = pytester_env.runpytest("--help").stdout.str()
    for flag in ("--specbound-hw", "--specbound-url", "--specbound-json", "--specbound-confidence",
                 "--specbound-benchmark-json", "--specbound-plot", "--specbound-log-dir",
                 "--specbound-samples", "--specbound-max-seconds", "--specbound-launch"):
        assert flag in out


# -- collection --------------------------------------------------------------------------------
def test_only_budget_dirs_and_explicit_files_are_collected(pytester_env, fake_vllm):
    write_budget(pytester_env, budget_text(fake_vllm.url))
    write_budget(pytester_env, budget_text(fake_vllm.url), name="elsewhere/other.toml")
    result = pytester_env.runpytest("--collect-only", "-q", "--specbound-hw=h100")
    out = result.stdout.str()
    assert "budgets/gate.toml::chat[h100-sxm]" in out and "other.toml" not in out
    result = pytester_env.runpytest("--collect-only", "-q", "--specbound-hw=h100",
                                    "elsewhere/other.toml")
    assert "elsewhere/other.toml::chat[h100-sxm]" in result.stdout.str()


def test_configured_budget_paths(pytester_env, fake_vllm):
    write_budget(pytester_env, budget_text(fake_vllm.url), name="perf/gate.toml")
    pytester_env.makeini("[pytest]\nspecbound_budgets = perf\n")
    out = pytester_env.runpytest("--collect-only", "-q", "--specbound-hw=h100x2").stdout.str()
    assert "perf/gate.toml::chat[h100-sxmx2]" in out


def test_no_hardware_skips_with_what_to_pass(pytester_env, fake_vllm):
    write_budget(pytester_env, budget_text(fake_vllm.url))
    result = pytester_env.runpytest("-rs")
    result.assert_outcomes(skipped=1)
    assert "pass --specbound-hw=NAME" in result.stdout.str()


@pytest.mark.parametrize(
    ("mutate", "needle"),
    [
        (lambda t: t.replace("[classes.chat]", "[classes.chat\n"), "budgets/gate.toml:15: TOML syntax error"),
        (lambda t: t.replace("max_tokens = 41", "max_token = 41"),
         "budgets/gate.toml:17: classes.chat.max_token: unknown key; valid: accept, category, "
         "concurrency, max_tokens"),
        (lambda t: t.replace("max_tokens = 41", 'max_tokens = "41"'),
         "budgets/gate.toml:17: classes.chat.max_tokens: must be an integer, got '41'"),
        (lambda t: t.replace("[3.5, 4.0]", "[4.0, 3.5]"),
         "budgets/gate.toml:18: classes.chat.accept: reversed band [4.0, 3.5]: low > high"),
        (lambda t: t.replace('prompts = "chat"', 'prompts = "poetry"'),
         "budgets/gate.toml:16: classes.chat.prompts: unknown prompt set 'poetry'; valid: coding, chat"),
        (lambda t: t.replace('backend = "vllm"', 'backend = "ollama"'),
         "budgets/gate.toml:11: server.backend: unknown backend 'ollama'; valid: sglang"),
        (lambda t: t.replace('method = "eagle3"', 'method = "medusa"'),
         "budgets/gate.toml:7: speculative.method: unknown method 'medusa'; valid: none, mtp"),
        (lambda t: t + "\n[extras]\nx = 1\n", "budgets/gate.toml:22: extras: unknown table; valid"),
        (lambda t: t.replace("min_efficiency = 0.5", "min_efficiency = 1.5"),
         "budgets/gate.toml:19: classes.chat.min_efficiency: 1.5 is outside [0, 1]"),
    ],
)
def test_malformed_budget_is_one_line_collection_error(pytester_env, fake_vllm, mutate, needle):
    write_budget(pytester_env, mutate(budget_text(fake_vllm.url)))
    result = pytester_env.runpytest("--specbound-hw=h100")
    assert result.ret == pytest.ExitCode.INTERRUPTED  # collection errors stop the run
    out = result.stdout.str()
    assert needle in out, out
    assert "Traceback" not in out


def test_unknown_marker_keyword_rejected(pytester_env):
    pytester_env.makepyfile("""
import pytest

@pytest.mark.specbound(prompt_class="chat", acept=(2, 3))
def test_x(specbound_measure):
    pass
""")
    result = pytester_env.runpytest("--specbound-hw=h100")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert "unknown keyword 'acept'; valid: prompt_class" in result.stderr.str()


# -- verdicts and reports ----------------------------------------------------------------------
def run_gate(pytester, url, accept="[3.5, 4.0]", min_eff=0.5, *extra_args):
    write_budget(pytester, budget_text(url, accept, min_eff))
    return pytester.runpytest("--specbound-hw=h100", "--specbound-samples=6",
                              "--specbound-json=out/results.json", *extra_args)


def test_pass_prints_summary_table_and_writes_json(pytester_env, fake_vllm):
    result = run_gate(pytester_env, fake_vllm.url, "[3.5, 4.0]", 0.5,
                      "--junitxml=out/junit.xml", "--specbound-benchmark-json=out/bench.json")
    result.assert_outcomes(passed=1)
    out = result.stdout.str()
    assert "specbound summary" in out
    assert "gate.toml::chat" in out and "4.00 [3.5, 4]" in out and "PASS" in out
    doc = json.loads((pytester_env.path / "out/results.json").read_text())
    assert doc["schema_version"] == 1 and doc["partial"] is False
    (r,) = doc["results"]
    for key in ("budget", "class", "hardware", "accept_length", "decode_tok_s", "roofline_tok_s",
                "efficiency", "verdict", "reasons", "requests"):
        assert key in r
    assert r["verdict"] == "pass" and r["accept_length"] == pytest.approx(4.0)
    assert r["hardware"] == "h100-sxm" and 0.5 < r["efficiency"] < 1.0
    assert doc["run"]["hardware"]["name"] == "h100-sxm" and doc["run"]["budgets"]
    junit = ET.parse(pytester_env.path / "out/junit.xml").getroot()
    props = {p.get("name"): p.get("value") for p in junit.iter("property")}
    assert props["specbound_verdict"] == "pass" and float(props["specbound_accept_length"]) == 4.0
    bench = json.loads((pytester_env.path / "out/bench.json").read_text())
    assert bench["benchmarks"][0]["extra_info"]["verdict"] == "pass"
    assert bench["benchmarks"][0]["stats"]["rounds"] >= 4


def test_benchmark_json_loads_in_pytest_benchmark_compare(pytester_env, fake_vllm):
    pytest.importorskip("pytest_benchmark")
    run_gate(pytester_env, fake_vllm.url, "[3.5, 4.0]", 0.5, "--specbound-benchmark-json=b.json")
    import subprocess
    import sys
    from pathlib import Path

    script = Path(sys.executable).parent / "pytest-benchmark"
    proc = subprocess.run([str(script), "compare", str(pytester_env.path / "b.json")],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert "chat[h100-sxm]" in proc.stdout


def test_drafter_regression_named_with_efficiency_still_fine(pytester_env, fake_vllm):
    # the fake runs at about 0.8 of the roofline: a floor of 0.3 leaves room for a loaded box
    result = run_gate(pytester_env, fake_vllm.url, "[4.5, 5.0]", 0.3)
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    out = result.stdout.str()
    assert "budgets/gate.toml::chat[h100-sxm] FAILED" in out
    assert "accept 4.00 is below its band [4.5, 5]: the drafter (or the prompts) changed" in out
    assert "is still fine: the system did not slow down" in out
    assert "roofline: weights" in out and "Traceback" not in out and "def runtest" not in out


def test_system_regression_named_with_accept_in_band(pytester_env, fake_vllm):
    result = run_gate(pytester_env, fake_vllm.url, "[3.5, 4.0]", 0.99)
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    out = result.stdout.str()
    assert "< floor" in out and "0.99 x roofline" in out
    assert "the system slowed down; accept 4.00 is inside [3.5, 4]" in out


def test_request_failures_are_an_error_not_a_low_number(pytester_env):
    from tests.servers.fake import FakeServer, Script

    with FakeServer("vllm", Script(fault="http500")) as srv:
        result = run_gate(pytester_env, srv.url)
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    out = result.stdout.str()
    assert "ERROR" in out and "HTTP 500" in out and "EngineCore encountered an issue" in out
    doc = json.loads((pytester_env.path / "out/results.json").read_text())
    assert doc["results"][0]["verdict"] == "error"


def test_a_launched_servers_500_names_the_error_its_log_ends_on(pytester_env):
    """A bare HTTP 500 ("see stack trace above") from a server the plugin launched: the error
    names the last exception in the server's log, and where the log is."""
    from tests.plugin.conftest import PY, ROOT, budget_text

    launch = (f"{PY} -m tests.servers.fake --family vllm --fault http500 --port {{port}}")
    (pytester_env.path / "budgets").mkdir()
    (pytester_env.path / "budgets" / "b.toml").write_text(
        budget_text(launch=launch).replace("[server]", f'[server]\ncwd = "{ROOT}"'))
    result = pytester_env.runpytest_subprocess("--specbound-hw=h100", "budgets",
                                               "--specbound-json=r.json", "-p", "no:randomly")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    (r,) = json.loads((pytester_env.path / "r.json").read_text())["results"]
    assert r["verdict"] == "error"
    (line,) = [t for t in r["text"] if "requests failed" in t]
    assert "HTTP 500" in line and "the server's log (" in line, line
    assert line.endswith("ends on: RuntimeError: CUDA error: out of memory"), line


def test_step_summary_markdown(pytester_env, fake_vllm, monkeypatch):
    summary = pytester_env.path / "summary.md"
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    run_gate(pytester_env, fake_vllm.url, "[4.5, 5.0]", 0.5)
    text = summary.read_text()
    assert "| class | hardware | conc | accept [band] |" in text and "| FAIL |" in text
    assert "the drafter (or the prompts) changed" in text


def test_plot(pytester_env, fake_vllm):
    pytest.importorskip("matplotlib")
    run_gate(pytester_env, fake_vllm.url, "[3.5, 4.0]", 0.5, "--specbound-plot=out/plot.png")
    assert (pytester_env.path / "out/plot.png").read_bytes()[:4] == b"\x89PNG"


def test_quiet_has_no_progress_lines(pytester_env, fake_vllm):
    out = run_gate(pytester_env, fake_vllm.url, "[3.5, 4.0]", 0.5, "-q").stdout.str()
    assert "requests," not in out


def test_marker_and_fixtures(pytester_env, fake_vllm):
    pytester_env.makepyfile(f"""
import pytest

@pytest.mark.specbound(prompt_class="chat", accept=(3.5, 4.0), min_efficiency=0.5,
                       model="llama-3.1-8b", speculative="eagle3:3", max_tokens=41,
                       server={{"url": "{fake_vllm.url}", "backend": "vllm",
                               "model_id": "test-model"}})
def test_gate(specbound_measure, specbound_check, specbound_roofline, specbound_hw):
    assert specbound_hw.name == "h100-sxm"
    assert specbound_roofline.max_accept == 4
    result = specbound_measure()
    assert result["accept_length"] == pytest.approx(4.0)
    specbound_check(result)

@pytest.mark.specbound(prompt_class="chat", accept=(4.5, 5.0), model="llama-3.1-8b",
                       speculative="eagle3:3", max_tokens=41,
                       server={{"url": "{fake_vllm.url}", "backend": "vllm",
                               "model_id": "test-model"}})
def test_gate_fails(specbound_measure, specbound_check):
    specbound_check(specbound_measure())
""")
    result = pytester_env.runpytest("--specbound-hw=h100", "--specbound-samples=5")
    result.assert_outcomes(passed=1, failed=1)
    out = result.stdout.str()
    assert "accept 4.00 is below its band [4.5, 5]" in out
    assert "Traceback" not in out


def test_a_bad_marker_stops_collection_with_one_line(pytester_env):
    pytester_env.makepyfile(
        "import pytest\n\n"
        "@pytest.mark.specbound(speculative='mtp:x', server={'url': 'http://127.0.0.1:1'})\n"
        "def test_gate(specbound_measure):\n    pass\n")
    result = pytester_env.runpytest("--specbound-hw=h100")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["ERROR: test_a_bad_marker_stops_collection_with_one_line.py::"
                                 "test_gate: specbound(speculative='mtp:x'): *whole numbers*"])
    assert "Traceback" not in result.stderr.str() + result.stdout.str()
