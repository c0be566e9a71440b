"""The CPU probe as the server sees the host: its threads, its working set; cached per machine."""

from __future__ import annotations

import os

import pytest

from pytest_specbound.gate.pipeline.plan import roofline_for, threads_from_launch
from pytest_specbound.gate.schema.budget import load_budget
from pytest_specbound.physics import cpu_probe
from pytest_specbound.physics.hardware import Hardware


@pytest.mark.parametrize("launch, threads", [
    ("llama-server -m x.gguf -t 1 -c 2048", 1),
    ("llama-server --threads 4 -m x.gguf", 4),
    ("llama-server --threads=3", 3),
    ("llama-server -tb 2 -m x", None),  # --threads-batch is not the decode thread count
    ("llama-server -m x", None),
    (None, None),
    ("llama-server 'unclosed", None),
])
def test_threads_from_launch(launch, threads):
    assert threads_from_launch(launch) == threads


def cpu(cores: int = 2) -> Hardware:
    return Hardware("cpu", "this host's CPU", 1, 30.0, 0.0, 1.0, "none", 0.0, "probe",
                    cores=cores)


BUDGET = """
[model]
name = "llama-3.2-1b"
[server]
launch = "llama-server -m x.gguf -t 1 --port {port}"
[classes.chat]
"""


def test_the_cpu_roofline_uses_the_servers_threads_and_working_set(tmp_path, monkeypatch):
    seen = []

    def fake_read(threads: int, working_set: float) -> tuple[float, str]:
        seen.append((threads, working_set))
        return 10.0, "fake probe"

    monkeypatch.setattr(cpu_probe, "read_bandwidth", fake_read)
    path = tmp_path / "b.toml"
    path.write_text(BUDGET)
    roof = roofline_for(load_budget(path), cpu(), {})
    assert seen == [(1, roof.model.weight_bytes)]  # -t 1, and one step reads every weight
    assert roof.hardware.bandwidth_gbs == 10.0 and roof.hardware.threads == 1
    assert roof.hardware.bf16_tflops == 0.5  # one of two cores: half the host's matmul rate
    path.write_text(BUDGET + "[roofline]\nthreads = 8\n")
    roofline_for(load_budget(path), cpu(cores=2), {})
    assert seen[-1][0] == 2  # never more threads than the host has


def test_gpus_are_not_probed(tmp_path, monkeypatch):
    monkeypatch.setattr(cpu_probe, "read_bandwidth", lambda *a: pytest.fail("probed a GPU"))
    from pytest_specbound.physics.hardware import parse_hardware

    path = tmp_path / "b.toml"
    path.write_text(BUDGET)
    assert roofline_for(load_budget(path), parse_hardware("h100"), {}).hardware.name == "h100-sxm"


def test_read_bandwidth_is_measured_once_per_threads_and_size_on_a_machine(tmp_path, monkeypatch):
    monkeypatch.setattr(cpu_probe, "CACHE", tmp_path / "cpu.json")
    monkeypatch.delenv("SPECBOUND_CPU_BANDWIDTH_GBS", raising=False)
    calls = []
    monkeypatch.setattr(cpu_probe, "_repeated_read_gbs",
                        lambda np, threads, size: calls.append((threads, size))
                        or cpu_probe.Probe(12.5, 0.98))
    assert cpu_probe.read_bandwidth(1, 3e6)[0] == 12.5
    assert cpu_probe.read_bandwidth(1, 3.1e6)[0] == 12.5  # same bucket: cached
    assert calls == [(1, cpu_probe.working_set_bucket(3e6))]
    cpu_probe.read_bandwidth(2, 3e6)
    assert len(calls) == 2  # another thread count is another measurement
    monkeypatch.setattr(cpu_probe, "host_fingerprint", lambda: "another machine")
    cpu_probe.read_bandwidth(1, 3e6)
    assert len(calls) == 3  # a cache written on another kind of machine is not trusted


def test_working_set_buckets_round_up_by_at_most_41_percent():
    for size in (1.5e6, 2e7, 3.3e7, 2e8):
        bucket = cpu_probe.working_set_bucket(size)
        assert size <= bucket <= size * 2 ** 0.5
    assert cpu_probe.working_set_bucket(10) == cpu_probe.MIN_WORKING_SET
    assert cpu_probe.working_set_bucket(1e12) == cpu_probe.MAX_WORKING_SET


def test_a_real_probe_of_a_small_working_set(tmp_path, monkeypatch):
    monkeypatch.setattr(cpu_probe, "CACHE", tmp_path / "cpu.json")
    monkeypatch.delenv("SPECBOUND_CPU_BANDWIDTH_GBS", raising=False)
    gbs, source = cpu_probe.read_bandwidth(1, 2e6)
    assert gbs > 0.1 and "1 thread reading 2 MiB" in source


def test_a_contended_probe_is_used_but_never_cached(tmp_path, monkeypatch):
    """A probe taken while other work held the cores reads low: it is taken again a moment
    later; if every try is contended this run uses the best and says so, and the next run
    measures again (a cached low figure would make every later roofline too low)."""
    monkeypatch.setattr(cpu_probe, "CACHE", tmp_path / "cpu.json")
    monkeypatch.setattr(cpu_probe, "RETRY_PAUSE_S", 0.0)
    monkeypatch.delenv("SPECBOUND_CPU_BANDWIDTH_GBS", raising=False)
    shares = [0.4, 0.3, 0.4, 0.97]
    monkeypatch.setattr(cpu_probe, "_repeated_read_gbs",
                        lambda np, threads, size: cpu_probe.Probe(9.0 if shares[0] < 0.75 else
                                                                  30.0, shares.pop(0)))
    gbs, source = cpu_probe.read_bandwidth(1, 3e6)
    assert gbs == 9.0 and "contended: its threads got at most 40% of the CPU in 3 tries; " \
        "not cached" in source
    assert not (tmp_path / "cpu.json").exists()
    assert cpu_probe.read_bandwidth(1, 3e6)[0] == 30.0  # measured again, quiet: cached
    assert cpu_probe.read_bandwidth(1, 3e6) == (30.0, cpu_probe.read_bandwidth(1, 3e6)[1])
    assert shares == []


def test_a_burst_of_other_work_is_outwaited_not_used(tmp_path, monkeypatch):
    """One contended try then a quiet one: the quiet rate is the roofline's, and it is cached."""
    monkeypatch.setattr(cpu_probe, "CACHE", tmp_path / "cpu.json")
    monkeypatch.setattr(cpu_probe, "RETRY_PAUSE_S", 0.0)
    monkeypatch.delenv("SPECBOUND_CPU_BANDWIDTH_GBS", raising=False)
    tries = [cpu_probe.Probe(11.0, 0.5), cpu_probe.Probe(30.0, 0.98), cpu_probe.Probe(99.0, 1.0)]
    monkeypatch.setattr(cpu_probe, "_repeated_read_gbs", lambda np, threads, size: tries.pop(0))
    gbs, source = cpu_probe.read_bandwidth(1, 3e6)
    assert (gbs, "contended" in source) == (30.0, False)
    assert len(tries) == 1  # stopped at the first quiet try
    assert cpu_probe.read_bandwidth(1, 3e6)[0] == 30.0  # cached


def test_other_work_on_the_host_reads_as_contention(monkeypatch):
    """The rest of the machine's CPU while a probe runs, from /proc/stat less this process."""
    import time

    clock = iter([100.0, 100.0 + 2 * (os.cpu_count() or 1)])  # others busy on every core
    monkeypatch.setattr(cpu_probe, "_busy_cpu_s", lambda: next(clock))
    work = cpu_probe.OtherWork()
    time.sleep(0.06)
    assert work.share_left() == 0.0
    monkeypatch.setattr(cpu_probe, "_busy_cpu_s", lambda: None)  # no /proc/stat: no verdict
    assert cpu_probe.OtherWork().share_left() == 1.0


def test_a_cache_from_before_the_contention_check_is_measured_again(tmp_path, monkeypatch):
    import json

    path = tmp_path / "cpu.json"
    monkeypatch.setattr(cpu_probe, "CACHE", path)
    monkeypatch.delenv("SPECBOUND_CPU_BANDWIDTH_GBS", raising=False)
    key = f"read:1:{cpu_probe.working_set_bucket(3e6)}"
    path.write_text(json.dumps({"host": cpu_probe.host_fingerprint(), key: 5.0}))  # format 1
    monkeypatch.setattr(cpu_probe, "_repeated_read_gbs",
                        lambda np, threads, size: cpu_probe.Probe(31.0, 0.99))
    assert cpu_probe.read_bandwidth(1, 3e6)[0] == 31.0
    assert json.loads(path.read_text())["format"] == cpu_probe.CACHE_FORMAT


def test_a_beaten_cpu_ceiling_drops_the_cached_probes(tmp_path, monkeypatch):
    """A server measured above the CPU roofline proves a probe read slow (cached while a shared
    host ran slower): the note says so and the next run measures every probe again. Above a
    catalog GPU's or a given bandwidth's roofline, the note says why that is not physics."""
    from dataclasses import replace

    from pytest_specbound.gate.pipeline.crosscheck import above_roofline as beaten_cpu_ceiling

    monkeypatch.setattr(cpu_probe, "CACHE", tmp_path / "cpu.json")
    monkeypatch.setattr(cpu_probe, "RETRY_PAUSE_S", 0.0)
    monkeypatch.delenv("SPECBOUND_CPU_BANDWIDTH_GBS", raising=False)
    rates = [20.0, 30.0]
    monkeypatch.setattr(cpu_probe, "_repeated_read_gbs",
                        lambda np, threads, size: cpu_probe.Probe(rates.pop(0), 0.99))
    gbs, source = cpu_probe.read_bandwidth(1, 3e6)
    host = replace(cpu(), bandwidth_gbs=gbs, source=source)
    assert beaten_cpu_ceiling(host, 0.97) is None  # under the ceiling: nothing to say
    gpu = beaten_cpu_ceiling(replace(host, name="h100-sxm", bandwidth_gbs=3350.0), 1.2)
    assert gpu and "efficiency 1.20" in gpu and "not allow" in gpu and "3350 GB/s" in gpu
    assert cpu_probe.read_bandwidth(1, 3e6)[0] == 20.0  # still cached
    note = beaten_cpu_ceiling(host, 1.04)
    assert note and "efficiency 1.04" in note and "measured again next run" in note
    assert cpu_probe.read_bandwidth(1, 3e6)[0] == 30.0  # measured again
    assert rates == []
    override = replace(host, source="SPECBOUND_CPU_BANDWIDTH_GBS")
    given = beaten_cpu_ceiling(override, 1.5)  # the user's figure, not a probe's
    assert given and "probe" not in given and "SPECBOUND_CPU_BANDWIDTH_GBS" in given
    cpu_probe.forget_probes()
    note = beaten_cpu_ceiling(host, 1.04)  # nothing cached: the probes ran in this very run
    assert note and "measured in this run" in note


def test_a_bad_bandwidth_override_is_one_line(monkeypatch):
    from pytest_specbound.errors import ConfigError
    from pytest_specbound.physics.cpu_probe import read_bandwidth

    monkeypatch.setenv("SPECBOUND_CPU_BANDWIDTH_GBS", "fast")
    with pytest.raises(ConfigError, match=r"^SPECBOUND_CPU_BANDWIDTH_GBS=fast: expected a number "
                                          r"> 0 \(GB/s\)$"):
        read_bandwidth(1, 1 << 20)
