"""Allreduce latency model for tensor parallelism at decode-sized messages.

One allreduce costs ``max(latency(tp), bandwidth)``: the latency is read from measured anchors per
link type and TP degree (interpolated in log2(tp), extrapolated from the last two anchors), the
bandwidth term is the ring's ``2 (tp-1)/tp * message / link``. At batch-1 decode the message is
hidden x tokens x 2 bytes (tens of KB), so latency dominates.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass


@dataclass(frozen=True)
class LinkModel:
    latency_us: dict[int, float]  # TP degree -> microseconds per small allreduce
    source: str

    def latency(self, tp: int) -> float:
        points = sorted(self.latency_us.items())
        if len(points) == 1:
            return points[0][1]
        x = math.log2(tp)
        for (t0, y0), (t1, y1) in itertools.pairwise(points):
            if tp <= t1 or (t1, y1) == points[-1]:
                x0, x1 = math.log2(t0), math.log2(t1)
                return max(0.0, y0 + (y1 - y0) * (x - x0) / (x1 - x0))
        raise AssertionError("unreachable")


_NVLINK = {2: 8.0, 4: 20.0, 8: 26.0}
_NVLINK_SRC = ("vidur H100 NVLink allreduce profiles: 7-11 us at TP2, 20-40 us at TP4/8; TP8 kept "
               "at 26 us, which gpt-fast's 328 tok/s Llama-2-7B TP8 on A100 bounds from above")
LINKS: dict[str, LinkModel] = {
    "pcie4": LinkModel({2: 8.0, 4: 12.0, 8: 20.0},
                       "seed-profile.md: ~8 us at TP2 on PCIe Gen4; TP4/8 one more us per ring "
                       "hop [assumed]"),
    "pcie5": LinkModel({2: 7.0, 4: 11.0, 8: 19.0}, "as PCIe Gen4 less 1 us [assumed]"),
    "pcie6": LinkModel({2: 7.0, 4: 11.0, 8: 19.0}, "as PCIe Gen5 [assumed]"),
    "nvlink3": LinkModel(_NVLINK, _NVLINK_SRC),
    "nvlink4": LinkModel(_NVLINK, _NVLINK_SRC),
    "nvlink5": LinkModel(_NVLINK, "as NVLink4 [assumed]"),
    "xgmi": LinkModel({2: 10.0, 4: 22.0, 8: 30.0}, "RCCL on MI300X [assumed, uncertain]"),
    "none": LinkModel({1: 0.0}, "single device"),
}


def allreduce_us(link: str, tp: int, message_bytes: float, link_gbs: float) -> float:
    """Microseconds for one allreduce of ``message_bytes`` over ``tp`` devices."""
    if tp <= 1:
        return 0.0
    bandwidth = 2 * (tp - 1) / tp * message_bytes / (link_gbs * 1e9) * 1e6 if link_gbs else 0.0
    return max(LINKS[link].latency(tp), bandwidth)
