"""``specbound hw`` and ``specbound models``: the hardware and model catalogs as tables."""

from __future__ import annotations

import argparse
import json
from typing import Any


def cmd_hw(args: argparse.Namespace) -> int:
    from pytest_specbound.physics.hardware import catalog_rows, detect_hardware

    if args.detect:
        hw = detect_hardware()
        print(json.dumps(hw.describe(), indent=2) if args.format == "json" else
              f"{hw.label}: {hw.title}, {hw.bandwidth_gbs:g} GB/s, {hw.memory_gb:g} GB, "
              f"link {hw.link} ({hw.source})")
        return 0
    rows = catalog_rows()
    if args.format == "json":
        print(json.dumps(rows, indent=2))
        return 0
    print(f"{'name':<14} {'GB/s':>7} {'GB':>5} {'bf16 TF':>8} {'link':<8} source")
    for r in rows:
        print(f"{r['name']:<14} {r['bandwidth_gbs']:>7g} {r['memory_gb']:>5g} "
              f"{r['bf16_tflops']:>8g} {r['link']:<8} {r['source']}")
    print("also: cpu (this host, measured), auto (NVML); NAMExN for N GPUs, e.g. a6000x2")
    return 0


def cmd_models(args: argparse.Namespace) -> int:
    from pytest_specbound.physics.models import catalog_rows

    rows = catalog_rows()
    if args.format == "json":
        print(json.dumps(rows, indent=2))
        return 0
    print(f"{'name':<20} {'dtype':<11} {'weights GB':>10} {'active B':>8} {'layers':>6} "
          f"{'experts':>8} {'MTP GB':>6}  source")
    for r in rows:
        dtype = r["dtype"] + (f"+{r['expert_dtype']}" if r["expert_dtype"] else "")
        experts = "{}/{}".format(*r["experts"]) if r["experts"] else "-"
        mtp = f"{r['mtp_gb']:g}" if r["mtp_gb"] else "-"
        also = f" (also: {', '.join(r['aliases'])})" if r["aliases"] else ""
        print(f"{r['name']:<20} {dtype:<11} {r['weight_gb']:>10.1f} {r['active_b']:>8.1f} "
              f"{r['layers']:>6} {experts:>8} {mtp:>6}  {r['source']}{also}")
    print("also: a config.json, a model folder (safetensors) or a .gguf file wherever a model is "
          "named")
    return 0


def add_models(sub: Any) -> None:
    p = sub.add_parser("models", help="list the model catalog (weights read per forward pass)")
    p.add_argument("--format", choices=("table", "json"), default="table")
    p.set_defaults(func=cmd_models)


def add_hw(sub: Any) -> None:
    p = sub.add_parser("hw", help="list the hardware catalog, or --detect through NVML")
    p.add_argument("--detect", action="store_true")
    p.add_argument("--format", choices=("table", "json"), default="table")
    p.set_defaults(func=cmd_hw)
