"""Prefill and decode on separate servers (SGLang's PD disaggregation, vLLM with NIXL, Dynamo,
llm-d): ``[disaggregated]`` in a budget. Requests go to the router (``[server] url``); the decode
server is attached apart, and its counters, settings and hardware are the ones the roofline,
the accept length and the cross-check read. TTFT is the router's, and its floor is the prompt's
compute on the prefill side plus the KV cache's transfer to the decode side (the prompt's KV
bytes over the link, each GPU's share over its own NIC)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from pytest_specbound.gate.schema.where import Where
from pytest_specbound.physics.hardware import Hardware, parse_hardware
from pytest_specbound.physics.roofline import Roofline

KEYS = {"decode_url", "prefill_url", "decode_hw", "prefill_hw", "kv_link_gbs"}


@dataclass(frozen=True)
class Disaggregated:
    """The decode server's URL (and the prefill server's), each side's hardware, the link."""

    decode_url: str
    prefill_url: str | None = None
    decode_hw: str | None = None  # default: the run's hardware (--specbound-hw)
    prefill_hw: str | None = None  # default: the decode side's
    kv_link_gbs: float | None = None  # per GPU, prefill to decode (default: the scale-out NIC)
    origin: str = "disaggregated"

    def sides(self, run_hw: Hardware) -> tuple[Hardware, Hardware]:
        """(decode, prefill) hardware."""
        decode = parse_hardware(self.decode_hw, origin=f"{self.origin}.decode_hw") \
            if self.decode_hw else run_hw
        prefill = parse_hardware(self.prefill_hw, origin=f"{self.origin}.prefill_hw") \
            if self.prefill_hw else decode
        return decode, prefill

    def link_gbs(self, decode: Hardware) -> float:
        return self.kv_link_gbs or decode.scale_out_gbs

    def kv_transfer_ms(self, prompt_tokens: float, roof: Roofline, prefill: Hardware) -> float:
        """One prompt's KV cache from the prefill side to the decode side: its bytes over the
        link, the GPUs of the smaller side each sending their share over their own NIC."""
        lanes = min(prefill.count, roof.hardware.count)
        return prompt_tokens * roof.model.kv_bytes_per_token / (
            self.link_gbs(roof.hardware) * 1e9 * lanes) * 1e3

    def figures(self, prompts: Sequence[int], roof: Roofline, prefill_roof: Roofline,
                ttft_median_ms: float | None) -> dict[str, Any]:
        """What the results say of the split: each side, and TTFT's floor per part (medians
        over the measured requests' own prompts)."""
        prefill = prefill_roof.hardware
        ordered = sorted(prompts)
        middle = float(ordered[len(ordered) // 2]) if ordered else 0.0
        transfer = self.kv_transfer_ms(middle, roof, prefill)
        compute = middle * prefill_roof.prefill_ms_per_token
        link = self.link_gbs(roof.hardware)
        note = (f"decode side {self.decode_url} ({roof.hardware.label}): its roofline, accept "
                f"and settings; TTFT through the router: the prompt on the prefill side "
                f"({prefill.label}) {compute:.1f} ms + its KV to the decode side "
                f"{transfer:.2f} ms ({middle:.0f} tokens, {link:g} GB/s per GPU) at the least")
        if ttft_median_ms is not None:
            note += f"; measured {ttft_median_ms:.1f} ms"
        return {"decode_url": self.decode_url, "prefill_url": self.prefill_url,
                "decode_hw": roof.hardware.label, "prefill_hw": prefill.label,
                "kv_link_gbs": link, "prompt_tokens_median": middle,
                "ttft_floor_ms": {"prefill": round(compute, 3),
                                  "kv_transfer": round(transfer, 4),
                                  "total": round(compute + transfer, 3)},
                "notes": [note]}


def parse_disaggregated(w: Where, t: dict[str, Any]) -> Disaggregated | None:
    """``[disaggregated]``: decode_url (required), prefill_url, decode_hw, prefill_hw,
    kv_link_gbs."""
    if not t:
        return None
    w.check_keys("disaggregated", t, KEYS)
    decode = w.string("disaggregated", t, "decode_url")
    if not decode or not decode.startswith(("http://", "https://")):
        raise w.error("disaggregated", "decode_url", "the decode server's URL (http://...) is "
                      "required: its counters and settings are the ones measured")
    prefill = w.string("disaggregated", t, "prefill_url")
    for key in ("decode_hw", "prefill_hw"):
        if key in t:
            parse_hardware(str(t[key]), origin=w.name("disaggregated", key))
    link = w.number("disaggregated", t, "kv_link_gbs", low=0.001)
    return Disaggregated(decode, prefill, w.string("disaggregated", t, "decode_hw"),
                         w.string("disaggregated", t, "prefill_hw"),
                         float(link) if link is not None else None,
                         w.name("disaggregated", ""))
