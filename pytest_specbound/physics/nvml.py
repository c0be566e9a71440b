"""GPU detection through NVML (``pynvml`` from nvidia-ml-py), imported only when asked."""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Any

from pytest_specbound.errors import ConfigError


@dataclass(frozen=True)
class DetectedGPU:
    name: str
    count: int
    memory_gb: float
    bandwidth_gbs: float  # memory clock x bus width x 2 (DDR) / 8
    nvlink: bool


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def detect(nvml: Any = None) -> DetectedGPU:
    """Query GPU 0 (and the count) through NVML; ``ConfigError`` says why it cannot."""
    if nvml is None:
        try:
            import pynvml

            nvml = pynvml
        except ImportError:
            raise ConfigError(
                "--specbound-hw=auto: NVML is not available (pip install "
                "'pytest-specbound[gpu]' for nvidia-ml-py); pass a catalog name instead"
            ) from None
    try:
        nvml.nvmlInit()
    except Exception as exc:  # pynvml raises NVMLError subclasses
        raise ConfigError(f"--specbound-hw=auto: no NVIDIA GPU found by NVML ({exc})") from None
    try:
        count = int(nvml.nvmlDeviceGetCount())
        if count == 0:
            raise ConfigError("--specbound-hw=auto: NVML sees no GPU")
        handle = nvml.nvmlDeviceGetHandleByIndex(0)
        name = _text(nvml.nvmlDeviceGetName(handle))
        mem = nvml.nvmlDeviceGetMemoryInfo(handle)
        clock_mhz = nvml.nvmlDeviceGetMaxClockInfo(handle, nvml.NVML_CLOCK_MEM)
        bus_bits = nvml.nvmlDeviceGetMemoryBusWidth(handle)
        nvlink = False
        try:
            nvlink = bool(nvml.nvmlDeviceGetNvLinkState(handle, 0))
        except Exception:
            nvlink = False
        return DetectedGPU(
            name=name,
            count=count,
            memory_gb=round(mem.total / 1e9, 1),
            bandwidth_gbs=round(clock_mhz * 1e6 * bus_bits * 2 / 8 / 1e9, 1),
            nvlink=nvlink,
        )
    finally:
        with contextlib.suppress(Exception):
            nvml.nvmlShutdown()
