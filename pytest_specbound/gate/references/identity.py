"""What identifies a run, so that a baseline is compared like with like: the machine (GPU names
and UUIDs and the driver through NVML, else the CPU model), the specbound version, the commit
(``GITHUB_SHA``, else git), and when it ran. Servers, launch commands and budget hashes are
per class (:class:`~pytest_specbound.gate.verdicts.result.ClassResult`)."""

from __future__ import annotations

import contextlib
import datetime
import os
import platform
import subprocess
from functools import lru_cache
from pathlib import Path


@lru_cache(maxsize=1)
def cpu_model() -> str:
    """The CPU's model name (``/proc/cpuinfo``, else what the platform says)."""
    try:
        for line in Path("/proc/cpuinfo").read_text(errors="replace").splitlines():
            if line.lower().startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def gpus() -> tuple[list[dict[str, str]], str | None]:
    """(each GPU's name and UUID, the driver version) through NVML; empty without it."""
    try:
        import pynvml
    except ImportError:
        return [], None
    try:
        pynvml.nvmlInit()
    except Exception:  # no driver, no GPU: pynvml raises its own NVMLError kinds
        return [], None
    try:
        found = []
        for i in range(pynvml.nvmlDeviceGetCount()):
            handle = pynvml.nvmlDeviceGetHandleByIndex(i)
            found.append({"name": _text(pynvml.nvmlDeviceGetName(handle)),
                          "uuid": _text(pynvml.nvmlDeviceGetUUID(handle))})
        return found, _text(pynvml.nvmlSystemGetDriverVersion())
    except Exception:
        return [], None
    finally:
        with contextlib.suppress(Exception):
            pynvml.nvmlShutdown()


def _text(value: object) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def commit() -> str | None:
    """The commit under test: ``GITHUB_SHA`` (GitHub Actions), ``CI_COMMIT_SHA`` (GitLab), else
    ``git rev-parse HEAD`` in the working directory (None outside a repository)."""
    for name in ("GITHUB_SHA", "CI_COMMIT_SHA"):
        if os.environ.get(name):
            return os.environ[name]
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True,
                             timeout=5, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() or None if out.returncode == 0 else None


def run_identity(on_gpu: bool) -> dict[str, object]:
    """The run's identity for the results JSON's ``run.identity``."""
    from pytest_specbound.version import __version__

    found, driver = gpus() if on_gpu else ([], None)
    return {"created": datetime.datetime.now(datetime.timezone.utc).isoformat(),
            "specbound": __version__, "commit": commit(), "cpu_model": cpu_model(),
            "gpus": found, "driver": driver,
            "ref": os.environ.get("GITHUB_REF_NAME") or None}


def machine_text(identity: object) -> str:
    """How a run's machine reads in a verdict: the GPUs' names, else the CPU model."""
    if not isinstance(identity, dict):
        return "an unknown machine"
    names = [str(g.get("name")) for g in identity.get("gpus") or [] if isinstance(g, dict)]
    if names:
        first = names[0]
        return f"{len(names)}x {first}" if len(names) > 1 and len(set(names)) == 1 \
            else ", ".join(names)
    return str(identity.get("cpu_model") or "an unknown machine")
