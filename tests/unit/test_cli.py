"""`specbound roofline` and `specbound hw`: output formats and one-line errors for every flag."""

import json
import subprocess
import sys

import pytest

from pytest_specbound.cli import main
from pytest_specbound.physics.roofline import COMPONENTS

SEED = ["roofline", "--hw", "a6000x2", "--model", "qwen3.6-27b", "--spec", "mtp:3"]


def run(capsys, *argv):
    code = main(list(argv))
    out = capsys.readouterr()
    return code, out.out, out.err


def test_seed_table(capsys):
    code, out, _ = run(capsys, *SEED, "--accept", "3.08")
    assert code == 0
    assert "target weight read" in out and "35.16" in out and "83%" in out
    assert "total per round                       42.3" in out
    assert "expected at accept 3.08: 72.8 tok/s" in out
    assert "ceiling at accept 4: 94.5 tok/s" in out


def test_seed_json_keys(capsys):
    code, out, _ = run(capsys, *SEED, "--accept", "3.08", "--format", "json")
    data = json.loads(out)
    assert code == 0
    assert set(data["components_ms"]) == set(COMPONENTS)
    for key in ("round_ms", "ceiling_tok_s", "accept", "expected_tok_s", "bound", "hardware",
                "model"):
        assert key in data
    assert data["components_ms"]["weights"] == pytest.approx(35.2, abs=0.2)
    assert data["round_ms"] == pytest.approx(42.4, abs=0.6)
    assert data["expected_tok_s"] == pytest.approx(73, abs=1)
    assert data["ceiling_tok_s"] == pytest.approx(94, abs=1.5)
    assert data["bound"] == "memory" and data["accept"] == 3.08
    assert data["hardware"]["name"] == "a6000x2" and data["model"]["name"] == "qwen3.6-27b"


def test_json_without_accept_uses_ceiling(capsys):
    _, out, _ = run(capsys, *SEED, "--format", "json")
    data = json.loads(out)
    assert data["accept"] == 4 and data["expected_tok_s"] == data["ceiling_tok_s"]


def test_fp8_via_cli(capsys):
    _, out, _ = run(capsys, *SEED, "--dtype", "fp8", "--format", "json")
    assert json.loads(out)["components_ms"]["weights"] == pytest.approx(35.16 / 2, abs=0.01)


def test_markdown(capsys):
    _, out, _ = run(capsys, *SEED, "--format", "markdown")
    assert out.startswith("| component | ms | share |") and "**total per round**" in out


def test_draft_model_and_tree(capsys):
    code, out, _ = run(capsys, "roofline", "--hw", "rtx3060", "--model", "llama-3.1-8b",
                       "--spec", "draft:5", "--draft-model", "llama-3.2-1b", "--format", "json")
    assert code == 0 and json.loads(out)["components_ms"]["draft"] > 0
    code, out, _ = run(capsys, "roofline", "--hw", "h100", "--model", "llama-3.1-8b",
                       "--spec", "eagle3:6:10", "--format", "json")
    assert json.loads(out)["max_accept"] == 7


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (["--hw", "a6000y2", "--model", "qwen3.6-27b"], "--hw=a6000y2: unknown hardware"),
        (["--hw", "a6000", "--model", "gpt-9"], "--model=gpt-9: unknown model; catalog:"),
        (["--hw", "a6000", "--model", "llama-2-7b", "--dtype", "fp7"], "--dtype=fp7: unknown dtype"),
        (["--hw", "a6000", "--model", "llama-2-7b", "--spec", "medusa"],
         "--spec=medusa: unknown method 'medusa'; valid: none, mtp"),
        (["--hw", "a6000", "--model", "llama-2-7b", "--spec", "mtp:x"], "whole numbers"),
        (["--hw", "a6000", "--model", "llama-2-7b", "--spec", "eagle3:6:3"], "must be >= STEPS"),
        (["--hw", "a6000", "--model", "llama-2-7b", "--spec", "mtp:3"], "has no MTP head"),
        (["--hw", "a6000", "--model", "llama-2-7b", "--spec", "draft:4"], "needs --draft-model"),
        (["--hw", "a6000", "--model", "qwen3.6-27b", "--spec", "mtp:3", "--accept", "5"],
         "--accept=5: above the most one round can emit"),
        (["--hw", "a6000", "--model", "llama-2-7b", "--batch", "0"], "--batch=0: must be at least 1"),
        (["--hw", "a6000", "--model", "llama-2-7b", "--overhead-ms", "-1"], "--overhead-ms=-1"),
    ],
)
def test_errors_are_one_line(capsys, argv, needle):
    code, out, err = run(capsys, "roofline", *argv)
    assert code == 2 and out == ""
    assert needle in err and err.count("\n") == 1 and "Traceback" not in err


@pytest.mark.parametrize(("argv", "needle"), [(["--accept", "abc"], "expected a number"),
                                              (["--accept", "0"], "expected a number > 0"),
                                              (["--context", "-3"], "expected a whole number >= 0"),
                                              (["--format", "xml"], "invalid choice")])
def test_argparse_errors_name_flag(capsys, argv, needle):
    with pytest.raises(SystemExit) as exc:
        main([*SEED, *argv])
    err = capsys.readouterr().err
    assert exc.value.code == 2 and needle in err and argv[0] in err


def test_hw_lists_catalog(capsys):
    code, out, _ = run(capsys, "hw")
    assert code == 0 and "a6000" in out and "768" in out and "h100-sxm" in out and "source" in out
    code, out, _ = run(capsys, "hw", "--format", "json")
    assert any(r["name"] == "mi300x" for r in json.loads(out))


def test_hw_detect_says_why_not(capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", None)  # as if nvidia-ml-py were not installed
    code, _, err = run(capsys, "hw", "--detect")
    assert code == 2 and "NVML is not available" in err and err.count("\n") == 1


def test_console_script_entry_point():
    proc = subprocess.run([sys.executable, "-m", "pytest_specbound.cli", *SEED, "--format", "json"],
                          capture_output=True, text=True, check=True)
    assert json.loads(proc.stdout)["bound"] == "memory"


@pytest.mark.parametrize("fmt", ["table", "json"])
def test_measure_prints_either_format(capsys, fmt):
    from tests.servers.fake import FakeServer, Script

    with FakeServer("llamacpp", Script(steps=[4] * 10, step_s=0.002)) as srv:
        code, out, err = run(capsys, "measure", "--url", srv.url, "--backend", "llamacpp",
                             "--samples", "3", "--max-tokens", "41", "--format", fmt)
    assert code == 0, err
    if fmt == "json":
        data = json.loads(out)
        assert data["samples"] == 3 and data["ttft_ms"]["median"] > 0
        assert data["accept_length"] == pytest.approx(4.0)
    else:
        assert "requests 3 (failed 0)" in out and "TTFT median" in out
        assert "accept length 4.00 (server)" in out


def test_roofline_on_cpu_matches_the_servers_threads(capsys, monkeypatch):
    from pytest_specbound.physics import cpu_probe

    monkeypatch.setenv("SPECBOUND_CPU_BANDWIDTH_GBS", "20")  # no probe: the figure is given
    code, out, _ = run(capsys, "roofline", "--hw", "cpu", "--model", "llama-3.2-1b", "--threads",
                       "1", "--format", "json")
    assert code == 0
    hw = json.loads(out)["hardware"]
    assert hw["threads"] == 1 and hw["bandwidth_gbs"] == 20.0
    assert hw["working_set_bytes"] > 1e9  # a 1B model in bf16: one step reads every weight
    assert cpu_probe.working_set_bucket(hw["working_set_bytes"]) == cpu_probe.MAX_WORKING_SET
    code, _, err = run(capsys, "roofline", "--hw", "h100", "--model", "llama-3.2-1b",
                       "--threads", "2")
    assert code == 2 and "--threads=2: only for --hw cpu" in err


def test_measure_at_concurrency_prints_the_others_prefill(capsys):
    from tests.servers.fake import FakeServer, Script

    with FakeServer("llamacpp", Script(steps=[4] * 10, step_s=0.002)) as srv:
        code, out, err = run(capsys, "measure", "--url", srv.url, "--backend", "llamacpp",
                             "--samples", "6", "--max-tokens", "41", "--concurrency", "2")
    assert code == 0, err
    assert "concurrency 2: aggregate" in out
    line = next(x for x in out.splitlines() if x.startswith("other requests' prompt tokens"))
    assert line.endswith(" on average"), line  # the fake llama-server reports prompt_n
