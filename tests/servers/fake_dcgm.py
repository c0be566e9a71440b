"""A DCGM exporter stand-in: dcgm-exporter's /metrics page, its metric names and labels
(``gpu``, ``UUID``, ``device``, ``modelName``, ``Hostname``), for GPUs on a node of its own."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


@dataclass
class DcgmGpu:
    sm_clock: int = 1980
    sm_max_clock: int = 1980
    mem_clock: int = 2619
    throttle: int = 0  # DCGM_FI_DEV_CLOCK_THROTTLE_REASONS bits (NVML's)
    power_w: float = 520.0
    temp_c: int = 61


@dataclass
class FakeDcgm:
    hostname: str = "node-b"
    gpus: list[DcgmGpu] = field(default_factory=lambda: [DcgmGpu() for _ in range(8)])
    event_reasons: bool = False  # name the bitmask DCGM_FI_DEV_CLOCKS_EVENT_REASONS (DCGM 3.3+)
    scrapes: int = 0

    def page(self) -> str:
        reasons = "DCGM_FI_DEV_CLOCKS_EVENT_REASONS" if self.event_reasons \
            else "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS"
        rows = [("DCGM_FI_DEV_SM_CLOCK", "gauge", "SM clock frequency (in MHz).", "sm_clock"),
                ("DCGM_FI_DEV_MEM_CLOCK", "gauge", "Memory clock frequency (in MHz).",
                 "mem_clock"),
                ("DCGM_FI_DEV_MAX_SM_CLOCK", "gauge", "Maximum SM clock (in MHz).",
                 "sm_max_clock"),
                ("DCGM_FI_DEV_GPU_TEMP", "gauge", "GPU temperature (in C).", "temp_c"),
                ("DCGM_FI_DEV_POWER_USAGE", "gauge", "Power draw (in W).", "power_w"),
                (reasons, "gauge", "Current clock throttle reasons.", "throttle")]
        out = []
        for name, kind, text, attr in rows:
            out += [f"# HELP {name} {text}", f"# TYPE {name} {kind}"]
            for i, gpu in enumerate(self.gpus):
                labels = (f'gpu="{i}",UUID="GPU-{i:08d}-fake",device="nvidia{i}",'
                          f'modelName="NVIDIA H200",Hostname="{self.hostname}",'
                          'DCGM_FI_DRIVER_VERSION="570.124.06"')
                out.append(f"{name}{{{labels}}} {getattr(gpu, attr)}")
        return "\n".join(out) + "\n"

    def __enter__(self) -> FakeDcgm:
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                if self.path != "/metrics":
                    self.send_error(404)
                    return
                fake.scrapes += 1
                body = fake.page().encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: object) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/metrics"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
