"""One streamed response as the client read it: the events with their arrival times, the headers.

The transport (:mod:`pytest_specbound.serving.transport`) makes one per request and fills in what
the connection saw; the event-stream decoder (:mod:`pytest_specbound.serving.sse`) adds the
events. Both import it from here, so neither imports the other for it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class StreamResult:
    sent_at: float  # perf_counter just before the request was written
    events: list[tuple[float, Any]] = field(default_factory=list)  # (seconds since sent, JSON)
    done: bool = False  # saw "data: [DONE]"
    headers: dict[str, str] = field(default_factory=dict)
    read_of_event: list[int] = field(default_factory=list)  # which socket read completed each event
    streaming_cpu_s: float = 0.0  # this process's CPU from before the send to the stream's end
    kernel_stamped: bool = False  # every read carries the kernel's receive time (not the reader's)
