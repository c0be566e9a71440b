"""The CPU compute ceiling from llama.cpp's own kernels: found beside llama-server, cached per
(threads, tokens, model, build), never cached when contended, and used by the roofline."""

from __future__ import annotations

import json
import sys
import textwrap

import pytest

from pytest_specbound.gate.pipeline.plan import roofline_for
from pytest_specbound.gate.schema.budget import load_budget
from pytest_specbound.physics import cpu_probe, kernel_probe
from pytest_specbound.physics.hardware import Hardware


def fake_bench(folder, samples, busy_s=0.0, exit_code=0):
    """An executable ``llama-bench`` printing llama-bench's JSON; it counts its runs in a file
    and spends ``busy_s`` of CPU (an idle bench reads as contended: its threads got no CPU)."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "llama-server").write_text("#!/bin/sh\n")
    (folder / "llama-server").chmod(0o755)
    bench = folder / "llama-bench"
    row = {"n_prompt": 0, "samples_ts": samples, "avg_ts": sum(samples) / len(samples)}
    bench.write_text(textwrap.dedent(f"""\
        #!{sys.executable}
        import json, sys, time
        with open({str(folder / "runs")!r}, "a") as f:
            f.write(" ".join(sys.argv[1:]) + "\\n")
        end = time.process_time() + {busy_s}
        while time.process_time() < end:
            pass
        row = {row!r}
        row["n_prompt"] = int(sys.argv[sys.argv.index("-p") + 1])
        print(json.dumps([row]))
        sys.exit({exit_code})
        """))
    bench.chmod(0o755)
    return bench


def runs(folder):
    path = folder / "runs"
    return path.read_text().splitlines() if path.exists() else []


@pytest.fixture
def cache(tmp_path, monkeypatch):
    """A cache of the test's own, on a host that reads as quiet whatever else this machine runs
    (the contention tests set the machine's busy CPU themselves)."""
    monkeypatch.setattr(cpu_probe, "CACHE", tmp_path / "cache" / "cpu.json")
    monkeypatch.setattr(cpu_probe, "_busy_cpu_s", cpu_probe._own_cpu_s)
    return tmp_path / "cache" / "cpu.json"


@pytest.mark.parametrize("launch, found", [
    ("{bin}/llama-server -m x.gguf -t 1", True),
    ("{bin}/llama-server", True),
    ("vllm serve x", False),
    ("{bin}/other-server -m x", False),
    ("'unclosed", False),
    (None, False),
])
def test_the_bench_is_found_beside_llama_server(tmp_path, launch, found):
    bench = fake_bench(tmp_path / "bin", [1.0])
    text = launch.format(bin=tmp_path / "bin") if launch else None
    assert kernel_probe.bench_beside(text) == (bench if found else None)


def test_no_bench_beside_the_server_is_no_probe(tmp_path):
    (tmp_path / "llama-server").write_text("")
    assert kernel_probe.bench_beside(f"{tmp_path}/llama-server -m x") is None


def test_the_fastest_repetition_over_the_steps_tokens_is_measured_once(tmp_path, cache):
    bench = fake_bench(tmp_path / "bin", [300.0, 340.0, 320.0], busy_s=0.3)
    gguf = tmp_path / "m.gguf"
    gguf.write_bytes(b"GGUF")
    rate, source = kernel_probe.kernel_tokens_per_s(bench, gguf, 1, 4)
    assert rate == 340.0
    assert "forward over 4 tokens with 1 thread" in source and "contended" not in source
    assert runs(tmp_path / "bin") == [f"-m {gguf} -p 4 -n 0 -t 1 -r 5 -o json"]
    assert kernel_probe.kernel_tokens_per_s(bench, gguf, 1, 4) == (rate, source)  # cached
    assert len(runs(tmp_path / "bin")) == 1
    kernel_probe.kernel_tokens_per_s(bench, gguf, 1, 16)  # another shape: measured
    assert len(runs(tmp_path / "bin")) == 2
    gguf.write_bytes(b"GGUF again")  # another model file (size and mtime): measured again
    kernel_probe.kernel_tokens_per_s(bench, gguf, 1, 4)
    assert len(runs(tmp_path / "bin")) == 3


def test_a_contended_bench_is_taken_again_used_but_not_cached(tmp_path, cache, monkeypatch):
    """Other work on the host while the bench runs (here: /proc/stat says every core was busy
    beside it): three tries, the fastest used, nothing cached, the next run measures again."""
    bench = fake_bench(tmp_path / "bin", [100.0], busy_s=0.1)
    gguf = tmp_path / "m.gguf"
    gguf.write_bytes(b"GGUF")
    busy = iter(range(0, 10**6, 10**3))
    monkeypatch.setattr(cpu_probe, "_busy_cpu_s", lambda: float(next(busy)))
    monkeypatch.setattr(cpu_probe, "RETRY_PAUSE_S", 0.0)
    rate, source = kernel_probe.kernel_tokens_per_s(bench, gguf, 2, 4)
    assert rate == 100.0 and "contended" in source and "not cached" in source
    assert len(runs(tmp_path / "bin")) == cpu_probe.ATTEMPTS
    monkeypatch.setattr(cpu_probe, "_busy_cpu_s", lambda: None)  # quiet now
    assert "contended" not in kernel_probe.kernel_tokens_per_s(bench, gguf, 2, 4)[1]
    assert len(runs(tmp_path / "bin")) == cpu_probe.ATTEMPTS + 1
    kernel_probe.kernel_tokens_per_s(bench, gguf, 2, 4)  # cached
    assert len(runs(tmp_path / "bin")) == cpu_probe.ATTEMPTS + 1


def test_the_benchs_own_start_up_is_not_contention(tmp_path, cache, monkeypatch):
    """A bench that spends its run on anything but its repetitions (loading the model, here a
    sleep) on a host where nothing else runs: its figure is cached. It used to read as
    contended (its thread CPU over the whole run's wall) and was measured again every run."""
    bench = fake_bench(tmp_path / "bin", [100.0], busy_s=0.0)
    gguf = tmp_path / "m.gguf"
    gguf.write_bytes(b"GGUF")
    rate, source = kernel_probe.kernel_tokens_per_s(bench, gguf, 2, 4)
    assert (rate, "contended" in source) == (100.0, False)
    kernel_probe.kernel_tokens_per_s(bench, gguf, 2, 4)
    assert len(runs(tmp_path / "bin")) == 1


def test_a_failing_bench_leaves_the_host_probe(tmp_path, cache):
    bench = fake_bench(tmp_path / "bin", [100.0], busy_s=0.3, exit_code=1)
    gguf = tmp_path / "m.gguf"
    gguf.write_bytes(b"GGUF")
    assert kernel_probe.kernel_tokens_per_s(bench, gguf, 1, 4) is None
    assert kernel_probe.kernel_tokens_per_s(bench, tmp_path / "missing.gguf", 1, 4) is None
    assert not cache.exists() or "kernel:" not in cache.read_text()


def test_the_roofline_takes_the_servers_kernels_at_each_levels_verify(tmp_path, cache,
                                                                       monkeypatch):
    """A llama-server budget on the CPU: the compute term is the bench's forward over the
    verify step's tokens (drafts + 1, times the concurrency level), with the server's -t."""
    from pytest_specbound.physics.gguf_writer import LlamaShape, write_llama_gguf

    bench = fake_bench(tmp_path / "bin", [400.0], busy_s=0.3)
    write_llama_gguf(tmp_path / "m.gguf", LlamaShape(n_layers=2, hidden=64, ffn=128, heads=2))
    monkeypatch.setattr(cpu_probe, "read_bandwidth", lambda threads, size: (1000.0, "fake"))
    (tmp_path / "b.toml").write_text(textwrap.dedent(f"""\
        [model]
        gguf = "m.gguf"
        [speculative]
        method = "ngram"
        steps = 3
        [server]
        launch = "{bench.with_name('llama-server')} -m m.gguf -t 1 --port {{port}}"
        [classes.chat]
        concurrency = [1, 4]
        """))
    budget = load_budget(tmp_path / "b.toml")
    host = Hardware("cpu", "cpu", 1, 30.0, 0.0, 1.0, "none", 0.0, "probe",
                    cores=2)
    one = roofline_for(budget, host, {}, 1)
    assert runs(tmp_path / "bin")[-1].split()[2:6] == ["-p", "4", "-n", "0"]
    verify_ms = 4 / 400.0 * 1e3  # the bench's 4-token forward, 10 ms
    compute = one.components_ms["weights"] + one.components_ms["kv_cache"] \
        + one.components_ms["compute"]
    assert compute == pytest.approx(verify_ms, rel=1e-6)
    assert one.bound == "compute" and "llama-bench" in one.hardware.source
    assert one.prefill_ms_per_token == 0.0  # one stream: no other prompt shares its rounds
    four = roofline_for(budget, host, {}, 4)
    assert [r.split()[2:4] for r in runs(tmp_path / "bin")[-2:]] == [["-p", "16"], ["-p", "512"]]
    assert four.hardware.describe()["kernel_tflops"] > 0
    # several streams: a prompt token is the bench's 512-token batch rate (400 tok/s here)
    assert four.prefill_ms_per_token == pytest.approx(1e3 / 400.0, rel=1e-6)
    assert "prefill: llama-bench" in four.hardware.source
    json.dumps(four.to_dict())  # the breakdown stays JSON-ready


def test_more_tokens_never_run_slower_per_token_than_fewer(tmp_path, cache):
    """The 16-token probe read slower per token than the 4-token one cached before it (two
    probes at two moments of a shared host): the larger forward's rate is raised to it, and
    says so, so the roofline at 4 streams is never above 4 times the one at 1 from noise."""
    bench = fake_bench(tmp_path / "bin", [340.0], busy_s=0.3)
    gguf = tmp_path / "m.gguf"
    gguf.write_bytes(b"GGUF")
    ident = f"{kernel_probe._identity(gguf)}:{kernel_probe._identity(bench)}"
    kernel_probe.save_cache({f"kernel:1:4:{ident}": 400.0, f"kernel:2:2:{ident}": 900.0})
    rate, source = kernel_probe.kernel_tokens_per_s(bench, gguf, 1, 16)
    assert rate == 400.0 and "raised to the 4-token forward's rate (400 tokens/s; this probe " \
        "read 340)" in source
    assert kernel_probe.kernel_tokens_per_s(bench, gguf, 1, 4)[0] == 400.0  # fewer: its own
    assert kernel_probe.at_least_fewer(500.0, 16, {4: 400.0}, "s") == (500.0, "s")
    assert kernel_probe.at_least_fewer(300.0, 16, {}, "s") == (300.0, "s")
