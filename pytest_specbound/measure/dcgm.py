"""GPU telemetry from DCGM exporters (NVIDIA's dcgm-exporter, which GPU clusters run on every
node, port 9400): ``[telemetry] dcgm = ["http://node-a:9400/metrics", ...]``. Each endpoint is
scraped in a background thread while a class is measured; each GPU's readings are read into the
same fields as NVML's (:func:`~pytest_specbound.measure.telemetry.sample_gpu`) and summarised and
judged the same way, each GPU named by its node (the ``Hostname`` label, else the endpoint's
host) and index (``gpu``). An endpoint that cannot be read is a note, never a failure."""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from pytest_specbound.measure.telemetry import GpuSample

DEFAULT_INTERVAL_S = 1.0  # dcgm-exporter refreshes every few seconds (its -c flag); 1 Hz is plenty
# dcgm-exporter's metric names (etc/default-counters.csv and DCGM's field names) -> our fields
FIELDS = {
    "DCGM_FI_DEV_SM_CLOCK": "sm_clock_mhz",
    "DCGM_FI_DEV_MEM_CLOCK": "mem_clock_mhz",
    "DCGM_FI_DEV_MAX_SM_CLOCK": "sm_max_clock_mhz",
    "DCGM_FI_DEV_MAX_MEM_CLOCK": "mem_max_clock_mhz",
    "DCGM_FI_DEV_GPU_TEMP": "temperature_c",
    "DCGM_FI_DEV_POWER_USAGE": "power_w",
    "DCGM_FI_DEV_POWER_MGMT_LIMIT": "power_limit_w",
    "DCGM_FI_DEV_GPU_UTIL": "utilization_pct",
    "DCGM_FI_DEV_FB_USED": "memory_used_gb",  # MiB
    "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS": "throttle",  # a bitmask, as NVML's
    "DCGM_FI_DEV_CLOCKS_EVENT_REASONS": "throttle",  # its name from DCGM 3.3
}
MIB_GB = 1024 * 1024 / 1e9


def parse_exposition(text: str, endpoint: str) -> dict[tuple[str, str], GpuSample]:
    """(node, gpu index) -> one reading, from a dcgm-exporter page."""
    from prometheus_client.parser import text_string_to_metric_families

    host = urlsplit(endpoint).hostname or endpoint
    out: dict[tuple[str, str], GpuSample] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            key = FIELDS.get(sample.name)
            if key is None:
                continue
            labels = sample.labels
            gpu = (labels.get("Hostname") or host, labels.get("gpu") or labels.get("device", "?"))
            value: float | int = float(sample.value)
            if key == "memory_used_gb":
                value *= MIB_GB
            if key == "throttle":
                value = int(value)
            out.setdefault(gpu, {})[key] = value
    return out


@dataclass
class DcgmTelemetry:
    """Scrapes ``endpoints`` every ``interval_s`` from :meth:`start` to :meth:`stop`."""

    endpoints: Sequence[str]
    interval_s: float = DEFAULT_INTERVAL_S
    samples: dict[tuple[str, str], list[GpuSample]] = field(default_factory=dict)
    failed: dict[str, str] = field(default_factory=dict)  # endpoint -> its last error
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def start(self) -> DcgmTelemetry:
        self._scrape()  # one reading before the class begins
        self._thread = threading.Thread(target=self._run, daemon=True, name="specbound-dcgm")
        self._thread.start()
        return self

    def _scrape(self) -> None:
        import requests

        for url in self.endpoints:
            try:
                resp = requests.get(url, timeout=5)
                resp.raise_for_status()
                readings = parse_exposition(resp.text, url)
            except Exception as exc:  # an exporter down or unreadable: a note, not a failure
                self.failed[url] = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
                continue
            self.failed.pop(url, None)
            for gpu, reading in readings.items():
                self.samples.setdefault(gpu, []).append(reading)

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            self._scrape()

    def stop(self) -> Mapping[str, object]:
        """Per GPU, the summary NVML's has, named by node and index; notes for the exporters
        that could not be read."""
        from pytest_specbound.measure.telemetry import summarise

        self._stop.set()
        if self._thread is not None:
            self._thread.join(5.0)
        self._scrape()  # one reading after
        gpus = [{"where": f"GPU {gpu} on {node}", "node": node, "gpu": gpu, "source": "dcgm",
                 **summarise(samples)}
                for (node, gpu), samples in sorted(self.samples.items())]
        notes = [f"DCGM exporter {url} could not be read: {why}"
                 for url, why in self.failed.items()]
        return {"gpus": gpus, **({"note": "; ".join(notes)} if notes else {})}


def start_dcgm(endpoints: Sequence[str], interval_s: float = DEFAULT_INTERVAL_S
               ) -> DcgmTelemetry:
    return DcgmTelemetry(tuple(endpoints), interval_s).start()
