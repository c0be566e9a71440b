"""Hardware: the catalog, ``NAME[xN]`` strings, this host (``cpu``) and NVML detection (``auto``)."""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Any

from pytest_specbound._toml import TomlTable, load_toml, loads_toml
from pytest_specbound.errors import ConfigError, close_matches
from pytest_specbound.physics.allreduce import LINKS
from pytest_specbound.physics.dtypes import INTEGER_KERNEL

CATALOG_PATH = "pytest_specbound/data/hardware.toml"
_SPEC = re.compile(r"^(?P<name>.+?)(?:x(?P<count>\d+))?$")
_NUMBER_KEYS = ("bandwidth_gbs", "memory_gb", "bf16_tflops", "fp8_tflops", "fp4_tflops",
                "link_gbs", "gpus_per_node", "scale_out_gbs")
GPUS_PER_NODE = 8
SCALE_OUT_GBS = 12.5  # one 100 Gb/s Ethernet port per GPU, where the catalog says nothing
SCALE_OUT_SOURCE = "[assumed] one 100 Gb/s Ethernet port per GPU"


@dataclass(frozen=True)
class Hardware:
    """One accelerator type times ``count`` (the tensor-parallel degree)."""

    name: str
    title: str
    count: int
    bandwidth_gbs: float
    memory_gb: float
    bf16_tflops: float
    link: str
    link_gbs: float
    source: str
    fp8_tflops: float = 0.0
    fp4_tflops: float = 0.0
    kernel_tflops: float = 0.0  # this host's CPU: the serving software's own kernels, measured
    prefill_kernel_tflops: float = 0.0  # likewise over a prompt-sized batch (their peak)
    cores: int = 0  # this host's CPU: its cores (0: not a CPU)
    threads: int = 0  # the server's threads, where matched to a server on this host
    working_set_bytes: int = 0  # the bytes one step reads, which the read probe used
    detected: str | None = None  # the GPU's name as NVML gave it
    gpus_per_node: int = GPUS_PER_NODE  # GPUs joined by ``link``; beyond them, the scale-out
    scale_out_gbs: float = SCALE_OUT_GBS  # per GPU between nodes, one direction
    scale_out_source: str = SCALE_OUT_SOURCE

    @property
    def nodes(self) -> int:
        """Nodes the ``count`` GPUs span."""
        return max(1, -(-self.count // self.gpus_per_node))

    def on_nodes(self, nodes: int, origin: str = "--nodes") -> Hardware:
        """These GPUs spread evenly over ``nodes`` nodes (a one-line error where they do not)."""
        if nodes < 1 or self.count % nodes:
            raise ConfigError(f"{origin}={nodes}: the {self.count} GPUs of {self.label} do not "
                              f"split evenly over {nodes} nodes")
        per_node = self.count // nodes
        if per_node > self.gpus_per_node:
            raise ConfigError(f"{origin}={nodes}: {per_node} GPUs a node, but a {self.name} node "
                              f"holds {self.gpus_per_node}")
        return replace(self, gpus_per_node=per_node)

    @property
    def label(self) -> str:
        return self.name if self.count == 1 else f"{self.name}x{self.count}"

    def tflops(self, dtype: str) -> float:
        """Dense TFLOP/s for matmuls in ``dtype`` (fp8/fp4 where the GPU has them). On this host's
        CPU: the served model's own kernels where they were measured (:mod:`kernel_probe`), else
        the fp32 matmul probe, and 0 (no compute ceiling) for quantized weights, which llama.cpp's
        integer kernels multiply several times faster than that probe (a Q4_0 model decoded at
        1.1-1.35x a roofline capped by it)."""
        if self.kernel_tflops:
            return self.kernel_tflops
        if self.name == "cpu" and dtype in INTEGER_KERNEL:
            return 0.0
        if dtype.startswith("fp4") and self.fp4_tflops:
            return self.fp4_tflops
        if dtype in ("fp8", "fp4", "mxfp4") and self.fp8_tflops:
            return self.fp8_tflops
        return self.bf16_tflops

    def prefill_tflops(self, dtype: str) -> float:
        """TFLOP/s a prompt's tokens are multiplied at, at most: on a GPU its compute ceiling; on
        this host's CPU the serving kernels' rate over a prompt-sized batch where it was
        measured, else 0 (unknown: a server's own kernels may beat the matmul probe, so no
        prefill time is counted rather than too much)."""
        if self.prefill_kernel_tflops:
            return self.prefill_kernel_tflops
        return 0.0 if self.name == "cpu" else self.tflops(dtype)

    def describe(self) -> dict[str, object]:
        return {
            "name": self.label,
            "title": self.title,
            "count": self.count,
            "bandwidth_gbs": self.bandwidth_gbs,
            "memory_gb": self.memory_gb,
            "bf16_tflops": self.bf16_tflops,
            **({"kernel_tflops": self.kernel_tflops} if self.kernel_tflops else {}),
            **({"prefill_kernel_tflops": self.prefill_kernel_tflops}
               if self.prefill_kernel_tflops else {}),
            "link": self.link,
            "link_gbs": self.link_gbs,
            **({"nodes": self.nodes, "gpus_per_node": self.gpus_per_node,
                "scale_out_gbs": self.scale_out_gbs, "scale_out_source": self.scale_out_source}
               if self.count > self.gpus_per_node else {}),
            "source": self.source,
            **{k: v for k, v in (("cores", self.cores), ("threads", self.threads),
                                 ("working_set_bytes", self.working_set_bytes),
                                 ("detected", self.detected)) if v},
        }


@lru_cache(maxsize=1)
def builtin_catalog() -> dict[str, TomlTable]:
    text = resources.files("pytest_specbound").joinpath("data/hardware.toml").read_text("utf-8")
    return loads_toml(text, CATALOG_PATH)


def user_catalog(path: str | Path) -> dict[str, TomlTable]:
    """Hardware tables from a TOML file: ``[NAME]`` rows, or ``[tool.specbound.hardware.NAME]``."""
    data = load_toml(path)
    table = data.get("tool", {}).get("specbound", {}).get("hardware", data)
    if not isinstance(table, dict):
        raise ConfigError(f"{path}: [tool.specbound.hardware] must be a table")
    return {k.lower(): _checked(v, f"{path}: hardware '{k}'") for k, v in table.items()}


def _checked(entry: Any, where: str) -> TomlTable:
    if not isinstance(entry, dict):
        raise ConfigError(f"{where}: must be a table")
    for key in ("bandwidth_gbs", "memory_gb", "bf16_tflops"):
        if key not in entry:
            raise ConfigError(f"{where}: missing key '{key}' (a number)")
    for key in _NUMBER_KEYS:
        if key in entry and not isinstance(entry[key], (int, float)):
            raise ConfigError(f"{where}: key '{key}' must be a number, got {entry[key]!r}")
    link = entry.get("link", "pcie4")
    if link not in LINKS:
        raise ConfigError(f"{where}: link='{link}' unknown; valid: {', '.join(LINKS)}")
    return {"source": "user catalog", **entry}


def _from_entry(name: str, entry: TomlTable, count: int) -> Hardware:
    return Hardware(
        name=name,
        title=str(entry.get("title", name)),
        count=count,
        bandwidth_gbs=float(entry["bandwidth_gbs"]),
        memory_gb=float(entry["memory_gb"]),
        bf16_tflops=float(entry["bf16_tflops"]),
        fp8_tflops=float(entry.get("fp8_tflops", 0.0)),
        fp4_tflops=float(entry.get("fp4_tflops", 0.0)),
        link=str(entry.get("link", "pcie4")) if count > 1 else "none",
        link_gbs=float(entry.get("link_gbs", 32)),
        source=str(entry["source"]),
        gpus_per_node=int(entry.get("gpus_per_node", GPUS_PER_NODE)),
        scale_out_gbs=float(entry.get("scale_out_gbs", SCALE_OUT_GBS)),
        scale_out_source=str(entry.get("scale_out_source", SCALE_OUT_SOURCE)),
    )


def _lookup(name: str, table: dict[str, TomlTable]) -> tuple[str, TomlTable] | None:
    for canonical, entry in table.items():
        if name == canonical or name in [a.lower() for a in entry.get("aliases", [])]:
            return canonical, entry
    return None


def parse_hardware(
    spec: str, extra: dict[str, TomlTable] | None = None, origin: str = "hardware"
) -> Hardware:
    """Resolve ``a6000x2``, ``h100-sxmx8``, ``cpu`` or ``auto`` to a :class:`Hardware`."""
    text = spec.strip().lower()
    if not text:
        raise ConfigError(f"{origin}: empty hardware string; e.g. a6000x2, h100x8, cpu, auto")
    table = {**builtin_catalog(), **(extra or {})}
    match = _SPEC.match(text)
    assert match is not None  # the pattern matches any non-empty string
    name, count_text = match.group("name"), match.group("count")
    found = _lookup(text, table) or (_lookup(name, table) if count_text else None)
    count = int(count_text) if count_text and not _lookup(text, table) else 1
    if count < 1:
        raise ConfigError(f"{origin}={spec}: GPU count must be at least 1")
    if name in ("cpu", "auto") or text in ("cpu", "auto"):
        base = detect_hardware() if name == "auto" else cpu_hardware()
        return base if count == 1 else replace(base, count=count)
    if not found:
        names = sorted(table)
        raise ConfigError(
            f"{origin}={spec}: unknown hardware '{name}'; did you mean "
            f"{', '.join(close_matches(name, names, 3))}? known: {', '.join(names)}, cpu, auto "
            f"(catalog: {CATALOG_PATH}; add your own under [tool.specbound.hardware.NAME])"
        )
    canonical, entry = found
    return _from_entry(canonical, entry, count)


def cpu_hardware() -> Hardware:
    """This host, measured: memory bandwidth by a short probe, cores counted."""
    from pytest_specbound.physics.cpu_probe import probe_cpu

    probe = probe_cpu()
    return Hardware(
        name="cpu",
        title=f"this host's CPU ({probe.cores} cores)",
        count=1,
        bandwidth_gbs=probe.bandwidth_gbs,
        memory_gb=0.0,
        bf16_tflops=probe.fp32_tflops,
        link="none",
        link_gbs=0.0,
        source=probe.source,
        cores=probe.cores,
    )


def server_threads(hw: Hardware, threads: int | None) -> int:
    """The threads a server on this host's CPU computes with: ``threads``, default every core,
    never more than the host has."""
    cores = hw.cores or 1
    return min(threads or cores, cores)


def matched_to_server(hw: Hardware, threads: int | None, working_set: float,
                      kernel: tuple[float, str] | None = None,
                      prefill: tuple[float, str] | None = None) -> Hardware:
    """``hw`` as one server sees it. For this host's CPU: the read bandwidth of ``threads``
    threads (default: every core) over ``working_set`` bytes, the bytes one step reads, so a
    model that fits in the last-level cache is measured as such; and ``kernel`` (TFLOP/s,
    source), the server's own kernels' rate over a verify step, as the compute ceiling, and
    ``prefill`` the same over a prompt-sized batch. A GPU is returned unchanged."""
    if hw.name != "cpu":
        return hw
    from pytest_specbound.physics.cpu_probe import read_bandwidth

    cores = hw.cores or 1
    n = server_threads(hw, threads)
    gbs, source = read_bandwidth(n, working_set)
    if kernel:
        source = f"{source}; compute: {kernel[1]}"
    if prefill:
        source = f"{source}; prefill: {prefill[1]}"
    return replace(hw, bandwidth_gbs=gbs, source=source, kernel_tflops=kernel[0] if kernel else 0.0,
                   prefill_kernel_tflops=prefill[0] if prefill else 0.0,
                   bf16_tflops=hw.bf16_tflops * n / cores,  # the matmul probe used every core
                   title=f"this host's CPU ({n} of {cores} cores, as the server runs)",
                   threads=n, working_set_bytes=int(working_set))


def detect_hardware(nvml: Any = None) -> Hardware:
    """GPUs seen through NVML, matched to the catalog by name; unknown GPUs from clocks."""
    from pytest_specbound.physics.nvml import detect

    gpu = detect(nvml)
    for canonical, entry in builtin_catalog().items():
        if gpu.name in entry.get("nvml_names", []):
            hw = _from_entry(canonical, entry, gpu.count)
            if gpu.count > 1 and not gpu.nvlink and hw.link.startswith("nvlink"):
                hw = replace(hw, link="pcie4", link_gbs=32.0)
            return replace(hw, detected=gpu.name)
    return Hardware(
        name=re.sub(r"[^a-z0-9]+", "-", gpu.name.lower()).strip("-"),
        title=gpu.name,
        count=gpu.count,
        bandwidth_gbs=gpu.bandwidth_gbs,
        memory_gb=gpu.memory_gb,
        bf16_tflops=0.0,
        link=("nvlink4" if gpu.nvlink else "pcie4") if gpu.count > 1 else "none",
        link_gbs=450.0 if gpu.nvlink else 32.0,
        source="NVML: memory clock x bus width (not in the catalog; TFLOP/s unknown)",
        detected=gpu.name,
    )


def catalog_rows() -> list[TomlTable]:
    """One row per catalog entry, for ``specbound hw``."""
    return [_from_entry(k, v, 1).describe() for k, v in builtin_catalog().items()]


def project_catalog(root: Path | None = None) -> dict[str, TomlTable]:
    """``[tool.specbound.hardware.NAME]`` tables from ``pyproject.toml`` in ``root`` (cwd)."""
    pyproject = (root or Path.cwd()) / "pyproject.toml"
    if not pyproject.is_file():
        return {}
    data = load_toml(pyproject)
    if not data.get("tool", {}).get("specbound", {}).get("hardware"):
        return {}
    return user_catalog(pyproject)


def resolve_hardware(spec: str, catalog_file: str | None = None,
                     origin: str = "hardware") -> Hardware:
    """``spec`` against the catalog, the project's catalog and ``catalog_file`` (a user's TOML)."""
    extra = project_catalog()
    if catalog_file:
        extra.update(user_catalog(catalog_file))
    return parse_hardware(spec, extra, origin)
