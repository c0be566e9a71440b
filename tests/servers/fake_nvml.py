"""A fake ``pynvml`` with every field telemetry reads, scenarios, old drivers and errors mid-run.

``FakeNVML(...)`` is a module-like object; ``install(namespace, **kw)`` fills a module's globals
with one (a ``pynvml.py`` that a pytester run imports instead of nvidia-ml-py).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any


class NVMLError(Exception):
    pass


class NVMLError_NotSupported(NVMLError):
    pass


@dataclass
class FakeNVML:
    gpus: int = 1
    mem_clock: int = 8001
    mem_max_clock: int = 8001
    sm_clock: int = 1980
    sm_max_clock: int = 1980
    throttle: int = 0  # nvmlClocksThrottleReasons bits
    pcie: tuple[int, int, int, int] = (4, 16, 4, 16)  # gen, width, max gen, max width
    processes: list[tuple[int, int]] = field(default_factory=list)  # (pid, bytes)
    ecc: list[int] = field(default_factory=lambda: [0])  # successive readings
    power_limit_mw: int = 700_000
    power_default_mw: int = 700_000
    old_driver: bool = False  # no throttle reasons, PCIe, NVLink, ECC, MIG, power default
    fail_after: int | None = None  # every call raises after this many
    init_fails: bool = False
    calls: int = 0

    NVML_CLOCK_SM = 1
    NVML_CLOCK_MEM = 2
    NVML_TEMPERATURE_GPU = 0
    NVML_MEMORY_ERROR_TYPE_UNCORRECTED = 1
    NVML_VOLATILE_ECC = 0

    def _tick(self) -> None:
        self.calls += 1
        if self.fail_after is not None and self.calls > self.fail_after:
            raise NVMLError("GPU is lost")

    def _newer(self) -> None:
        self._tick()
        if self.old_driver:
            raise NVMLError_NotSupported("Not Supported")

    def nvmlInit(self) -> None:
        if self.init_fails:
            raise NVMLError("Driver Not Loaded")

    def nvmlShutdown(self) -> None:
        pass

    def nvmlDeviceGetCount(self) -> int:
        return self.gpus

    def nvmlDeviceGetHandleByIndex(self, i: int) -> int:
        return i

    def nvmlDeviceGetClockInfo(self, h: int, kind: int) -> int:
        self._tick()
        return self.sm_clock if kind == self.NVML_CLOCK_SM else self.mem_clock

    def nvmlDeviceGetMaxClockInfo(self, h: int, kind: int) -> int:
        self._tick()
        return self.sm_max_clock if kind == self.NVML_CLOCK_SM else self.mem_max_clock

    def nvmlDeviceGetCurrentClocksThrottleReasons(self, h: int) -> int:
        self._newer()
        return self.throttle

    def nvmlDeviceGetPowerUsage(self, h: int) -> int:
        self._tick()
        return 350_000

    def nvmlDeviceGetEnforcedPowerLimit(self, h: int) -> int:
        self._tick()
        return self.power_limit_mw

    def nvmlDeviceGetPowerManagementDefaultLimit(self, h: int) -> int:
        self._newer()
        return self.power_default_mw

    def nvmlDeviceGetTemperature(self, h: int, kind: int) -> int:
        self._tick()
        return 84 if self.throttle & 0x60 else 61

    def nvmlDeviceGetUtilizationRates(self, h: int) -> Any:
        self._tick()
        return SimpleNamespace(gpu=97, memory=88)

    def nvmlDeviceGetMemoryInfo(self, h: int) -> Any:
        self._tick()
        return SimpleNamespace(used=70e9, total=80e9, free=10e9)

    def nvmlDeviceGetCurrPcieLinkGeneration(self, h: int) -> int:
        self._newer()
        return self.pcie[0]

    def nvmlDeviceGetCurrPcieLinkWidth(self, h: int) -> int:
        self._newer()
        return self.pcie[1]

    def nvmlDeviceGetMaxPcieLinkGeneration(self, h: int) -> int:
        self._newer()
        return self.pcie[2]

    def nvmlDeviceGetMaxPcieLinkWidth(self, h: int) -> int:
        self._newer()
        return self.pcie[3]

    def nvmlDeviceGetNvLinkState(self, h: int, link: int) -> int:
        self._newer()
        if link >= 4:
            raise NVMLError("Invalid Argument")
        return 1

    def nvmlDeviceGetComputeRunningProcesses(self, h: int) -> list[Any]:
        self._tick()
        return [SimpleNamespace(pid=pid, usedGpuMemory=used) for pid, used in self.processes]

    def nvmlDeviceGetTotalEccErrors(self, h: int, kind: int, counter: int) -> int:
        self._newer()
        return self.ecc.pop(0) if len(self.ecc) > 1 else self.ecc[0]

    def nvmlDeviceGetMigMode(self, h: int) -> tuple[int, int]:
        self._newer()
        return (0, 0)


def install(namespace: dict[str, Any], **kw: Any) -> FakeNVML:
    """Make ``namespace`` (a module's globals) act as pynvml backed by one FakeNVML."""
    fake = FakeNVML(**kw)
    for name in dir(fake):
        if name.startswith(("nvml", "NVML")):
            namespace[name] = getattr(fake, name)
    namespace["NVMLError"] = NVMLError
    namespace["fake"] = fake
    return fake
