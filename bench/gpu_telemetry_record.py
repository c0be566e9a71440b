"""Record real NVML telemetry on a GPU machine: the prepared device check of issue 16.

Samples every GPU with the plugin's own sampler (measure/telemetry.py) for ``--seconds``, at
the default 2 Hz and, for comparison, at 100 Hz, optionally while ``--launch CMD`` runs (a
llama-server or vLLM serving on the GPU, started in its own process group and stopped after);
then prints each summary and its findings, the raw first sample per GPU (every field this
driver answers), and writes them all to ``$OUT/gpu_telemetry.json`` (or ``--out``).

On the device machine, which reaches no package index: carry nvidia-ml-py's single module
(``pip download nvidia-ml-py --no-deps`` here, unzip ``pynvml.py`` into ``bench/vendor/``) and run

    python3 bench/gpu_telemetry_record.py --seconds 20 [--launch "llama-server -m m.gguf -ngl 99"]

``--fake`` runs the same path against tests/servers/fake_nvml.py (thermal throttling on GPU 1),
which is how it is checked without a GPU.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parent), str(HERE / "vendor")]

from pytest_specbound.measure.telemetry import (  # noqa: E402
    DEFAULT_INTERVAL_S,
    Telemetry,
    findings,
    in_process_group,
    sample_gpu,
)


def nvml_module(fake: bool) -> Any:
    if fake:
        from tests.servers.fake_nvml import FakeNVML

        return FakeNVML(gpus=2, mem_clock=5001, throttle=0x40)
    import pynvml

    return pynvml


def record(nvml: Any, seconds: float, interval_s: float, pgid: int | None) -> dict[str, Any]:
    is_server = in_process_group(pgid) if pgid is not None else None
    tele = Telemetry(nvml, interval_s, is_server).start()
    time.sleep(seconds)
    summary = tele.stop()
    return {"interval_s": interval_s, "summary": summary,
            "findings": [text for _, text in findings(summary)]}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--launch", help="a command serving on the GPU while sampling")
    parser.add_argument("--fake", action="store_true", help="a fake NVML (no GPU needed)")
    parser.add_argument("--out", help="where to write the JSON (default $OUT/gpu_telemetry.json)")
    args = parser.parse_args()
    nvml = nvml_module(args.fake)
    nvml.nvmlInit()
    count = int(nvml.nvmlDeviceGetCount())
    raw = [sample_gpu(nvml, nvml.nvmlDeviceGetHandleByIndex(i)) for i in range(count)]
    proc = None
    if args.launch:
        proc = subprocess.Popen(shlex.split(args.launch), start_new_session=True,
                                stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
        time.sleep(min(10.0, args.seconds / 2))  # let it load onto the GPU
    try:
        runs = [record(nvml, args.seconds, DEFAULT_INTERVAL_S, proc.pid if proc else None),
                record(nvml, args.seconds / 4, 0.01, proc.pid if proc else None)]
    finally:
        if proc is not None:
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(30)
    doc = {"gpus": count, "first_sample": raw, "runs": runs, "launch": args.launch,
           "fake": args.fake}
    text = json.dumps(doc, indent=2, default=str)
    print(text)
    out = Path(args.out or Path(os.environ.get("OUT", ".")) / "gpu_telemetry.json")
    out.write_text(text)
    for run in runs:
        gpu0 = run["summary"]["gpus"][0] if run["summary"]["gpus"] else {}
        print(f"{1 / run['interval_s']:g} Hz: {gpu0.get('samples', 0)} samples of GPU 0; "
              f"findings: {run['findings'] or 'none'}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
