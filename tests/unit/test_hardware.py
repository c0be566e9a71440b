import pytest

from pytest_specbound.errors import ConfigError
from pytest_specbound.physics.allreduce import allreduce_us
from pytest_specbound.physics.hardware import (
    builtin_catalog,
    detect_hardware,
    parse_hardware,
    project_catalog,
    user_catalog,
)

REQUIRED = ["a6000", "3090", "4090", "l4", "l40s", "a10g", "a100-40g", "a100-80g",
            "a100-80g-pcie", "h100-sxm", "h100-pcie", "h100-nvl", "h200", "gh200", "b200", "mi300x"]


def test_catalog_has_required_entries_with_sources():
    cat = builtin_catalog()
    for name in REQUIRED:
        entry = cat[name]
        assert entry["source"].strip(), name
        for key in ("bandwidth_gbs", "memory_gb", "bf16_tflops", "link", "link_gbs"):
            assert key in entry, (name, key)


@pytest.mark.parametrize(
    ("spec", "name", "count"),
    [("a6000x2", "a6000", 2), ("A6000X2", "a6000", 2), ("h100x8", "h100-sxm", 8),
     ("h100-sxmx8", "h100-sxm", 8), ("h100", "h100-sxm", 1), ("3090x2", "3090", 2),
     ("a100-80g-pcie", "a100-80g-pcie", 1), ("b200x4", "b200", 4)],
)
def test_parse_names(spec, name, count):
    hw = parse_hardware(spec)
    assert (hw.name, hw.count) == (name, count)


def test_single_gpu_has_no_link():
    assert parse_hardware("h100").link == "none"
    assert parse_hardware("h100x2").link == "nvlink4"


@pytest.mark.parametrize("spec", ["a6000y2", "h1000", "tpu-v5"])
def test_unknown_hardware_is_one_line_with_choices(spec):
    with pytest.raises(ConfigError) as err:
        parse_hardware(spec)
    msg = str(err.value)
    assert "\n" not in msg and spec in msg and "a6000" in msg and "hardware.toml" in msg


def test_unknown_hardware_suggests_close_match():
    with pytest.raises(ConfigError, match="did you mean a6000"):
        parse_hardware("a6000y2")


def test_zero_count_rejected():
    with pytest.raises(ConfigError, match="at least 1"):
        parse_hardware("a6000x0")


def test_allreduce_seed_and_vidur_anchors():
    msg = 5120 * 4 * 2
    assert allreduce_us("pcie4", 2, msg, 32) == pytest.approx(8.0)
    assert 7 <= allreduce_us("nvlink4", 2, msg, 450) <= 11
    assert 20 <= allreduce_us("nvlink4", 4, msg, 450) <= 40
    assert 20 <= allreduce_us("nvlink4", 8, msg, 450) <= 40
    # large messages become bandwidth bound
    assert allreduce_us("pcie4", 2, 64e6, 32) == pytest.approx(64e6 / 32e9 * 1e6)
    assert allreduce_us("nvlink4", 1, msg, 450) == 0.0
    assert allreduce_us("nvlink4", 3, msg, 450) == pytest.approx(8 + 12 * 0.585, abs=0.1)


def test_user_catalog_file_and_pyproject(tmp_path):
    f = tmp_path / "hw.toml"
    f.write_text('[mygpu]\nbandwidth_gbs = 1000\nmemory_gb = 32\nbf16_tflops = 100\nlink = "pcie5"\n'
                 'source = "vendor sheet"\n')
    hw = parse_hardware("mygpux2", user_catalog(f))
    assert (hw.bandwidth_gbs, hw.count, hw.link) == (1000, 2, "pcie5")
    (tmp_path / "pyproject.toml").write_text(
        "[tool.specbound.hardware.lab]\nbandwidth_gbs = 500\nmemory_gb = 16\nbf16_tflops = 50\n")
    assert parse_hardware("lab", project_catalog(tmp_path)).bandwidth_gbs == 500


def test_user_catalog_errors_name_the_key(tmp_path):
    f = tmp_path / "hw.toml"
    f.write_text("[mygpu]\nmemory_gb = 32\nbf16_tflops = 100\n")
    with pytest.raises(ConfigError, match="missing key 'bandwidth_gbs'"):
        user_catalog(f)
    f.write_text('[mygpu]\nbandwidth_gbs = "fast"\nmemory_gb = 32\nbf16_tflops = 100\n')
    with pytest.raises(ConfigError, match="'bandwidth_gbs' must be a number"):
        user_catalog(f)
    f.write_text('[mygpu]\nbandwidth_gbs = 1\nmemory_gb = 32\nbf16_tflops = 100\nlink = "ib"\n')
    with pytest.raises(ConfigError, match="link='ib' unknown; valid: pcie4"):
        user_catalog(f)


class FakeNVML:
    NVML_CLOCK_MEM = 2

    def __init__(self, name, count=2, nvlink=False, fail=False):
        self.name, self.count, self.nvlink, self.fail = name, count, nvlink, fail

    def nvmlInit(self):
        if self.fail:
            raise RuntimeError("NVML Shared Library Not Found")

    def nvmlShutdown(self):
        pass

    def nvmlDeviceGetCount(self):
        return self.count

    def nvmlDeviceGetHandleByIndex(self, i):
        return i

    def nvmlDeviceGetName(self, h):
        return self.name.encode()

    def nvmlDeviceGetMemoryInfo(self, h):
        class M:
            total = 48 * 1024**3
        return M()

    def nvmlDeviceGetMaxClockInfo(self, h, kind):
        return 8001  # MHz; GDDR6 16 Gbps effective

    def nvmlDeviceGetMemoryBusWidth(self, h):
        return 384

    def nvmlDeviceGetNvLinkState(self, h, link):
        if not self.nvlink:
            raise RuntimeError("not supported")
        return 1


def test_detect_known_gpu_matches_catalog():
    hw = detect_hardware(FakeNVML("NVIDIA RTX A6000"))
    assert (hw.name, hw.count, hw.bandwidth_gbs, hw.link) == ("a6000", 2, 768, "pcie4")


def test_detect_unknown_gpu_uses_clocks():
    hw = detect_hardware(FakeNVML("NVIDIA Future GPU", count=1))
    assert hw.bandwidth_gbs == pytest.approx(8001e6 * 384 * 2 / 8 / 1e9, abs=0.1)
    assert "memory clock" in hw.source


def test_detect_h100_without_nvlink_falls_back_to_pcie():
    hw = detect_hardware(FakeNVML("NVIDIA H100 80GB HBM3", count=2, nvlink=False))
    assert hw.link == "pcie4"
    assert detect_hardware(FakeNVML("NVIDIA H100 80GB HBM3", nvlink=True)).link == "nvlink4"


def test_detect_without_driver_is_one_line():
    with pytest.raises(ConfigError, match="no NVIDIA GPU found by NVML"):
        detect_hardware(FakeNVML("x", fail=True))


def test_cpu_profile_uses_override(monkeypatch, tmp_path):
    import pytest_specbound.physics.cpu_probe as probe

    monkeypatch.setattr(probe, "CACHE", tmp_path / "cpu.json")
    cores = __import__("os").cpu_count()
    import json

    (tmp_path / "cpu.json").write_text(json.dumps({
        "cores": cores, "bandwidth_gbs": 9.0, "fp32_tflops": 0.1, "source": "cached",
        "host": probe.host_fingerprint(), "format": probe.CACHE_FORMAT}))
    assert parse_hardware("cpu").bandwidth_gbs == 9.0
    monkeypatch.setenv("SPECBOUND_CPU_BANDWIDTH_GBS", "12.5")
    hw = parse_hardware("cpu")
    assert hw.bandwidth_gbs == 12.5 and hw.cores >= 1


def test_no_cpu_compute_ceiling_for_integer_kernel_weights(monkeypatch):
    """The CPU's compute ceiling is an fp32 matmul probe: it bounds float weights, not the
    integer kernels llama.cpp runs quantized weights with (those are memory-bound only)."""
    monkeypatch.setenv("SPECBOUND_CPU_BANDWIDTH_GBS", "20")
    cpu = parse_hardware("cpu")
    assert cpu.tflops("fp16") == cpu.bf16_tflops > 0
    for dtype in ("q4_0", "q8_0", "q4_k", "int8"):
        assert cpu.tflops(dtype) == 0.0
    assert parse_hardware("h100").tflops("int8") == parse_hardware("h100").bf16_tflops
