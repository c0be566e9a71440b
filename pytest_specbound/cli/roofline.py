"""``specbound roofline``: one round's breakdown, or the frontier over a list of batches."""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from pytest_specbound.cli.args import (
    FORMATS,
    batch_list,
    hardware_from_args,
    nonneg_int,
    positive_float,
    positive_int,
)
from pytest_specbound.errors import SpecboundError

if TYPE_CHECKING:
    from pytest_specbound.physics.layout import Layout
    from pytest_specbound.physics.roofline import Roofline

ROOFLINE_FLAGS = {"spec": "--spec", "draft_model": "--draft-model", "draft_dtype": "--draft-dtype",
                  "batch": "--batch",
                  "context": "--context", "overhead_ms": "--overhead-ms",
                  "draft_step_ms": "--draft-step-ms", "layout": "--tp/--pp/--ep"}


def layout_from_args(args: argparse.Namespace, gpus: int) -> Layout | None:
    """``--tp/--pp/--ep/--dp-attention/--overlap`` as a layout (None: none of them given; the
    GPUs are then one TP group). ``--tp`` defaults to the GPUs over ``--pp``."""
    from pytest_specbound.physics.layout import Layout

    given = (args.tp, args.pp, args.ep)
    if all(v is None for v in given) and not args.dp_attention and not args.overlap:
        return None
    pp = args.pp or 1
    return Layout(tp=args.tp or max(1, gpus // pp), pp=pp, ep=args.ep or 1,
                  dp_attention=args.dp_attention, overlap=args.overlap)


def cmd_roofline(args: argparse.Namespace) -> int:
    from pytest_specbound.physics import render
    from pytest_specbound.physics.dtypes import canonical_dtype
    from pytest_specbound.physics.models import load_model
    from pytest_specbound.physics.roofline import Deployment, compute_roofline
    from pytest_specbound.physics.speculative import HEAD_METHODS, parse_speculation

    hw = hardware_from_args(args.hw, args.hw_catalog)
    dtype = canonical_dtype(args.dtype, "--dtype") if args.dtype else None
    model = load_model(args.model, dtype, "--model")
    spec = parse_speculation(args.spec, origin="--spec")
    if args.draft_dtype and not args.draft_model and spec.method not in HEAD_METHODS:
        raise SpecboundError(f"--draft-dtype={args.draft_dtype}: needs --draft-model or a "
                             f"drafting head to apply to ({', '.join(HEAD_METHODS)})")
    draft_dtype = canonical_dtype(args.draft_dtype, "--draft-dtype") if args.draft_dtype else None
    draft = (load_model(args.draft_model, draft_dtype, "--draft-model") if args.draft_model
             else None)
    if args.threads is not None and hw.name != "cpu":
        raise SpecboundError(f"--threads={args.threads}: only for --hw cpu (a GPU has no threads "
                             "to match)")
    if hw.name == "cpu":  # as the gate does: the server's threads over one step's reads
        from pytest_specbound.physics.hardware import matched_to_server

        reads = model.weight_bytes + (draft.weight_bytes if draft else 0.0)
        hw = matched_to_server(hw, args.threads, reads)
    from pytest_specbound.physics.overheads import overhead_for

    if args.nodes is not None:
        hw = hw.on_nodes(args.nodes)
    layout = layout_from_args(args, hw.count)

    overhead, source = ((args.overhead_ms, "--overhead-ms") if args.overhead_ms is not None
                        else overhead_for(args.backend))
    def at(batch: int) -> Roofline:
        return compute_roofline(hw, model, spec, draft,
                                Deployment(args.context, batch, overhead, args.draft_step_ms,
                                           source, layout),
                                draft_dtype, ROOFLINE_FLAGS)

    if len(args.batch) > 1:
        print_frontier(at, args.batch, args.accept, args.format)
        if args.format == "table" and (layout is not None or hw.nodes > 1):
            for batch in args.batch:  # at a layout, each batch's parts per GPU
                print()
                print(render.table(at(batch), args.accept))
        return 0
    roof = at(args.batch[0])
    if args.accept is not None and args.accept > roof.max_accept:
        raise SpecboundError(
            f"--accept={args.accept:g}: above the most one round can emit with "
            f"{spec.label} ({roof.max_accept})"
        )
    if args.format == "json":
        print(json.dumps(roof.to_dict(args.accept), indent=2))
    elif args.format == "markdown":
        print(render.markdown(roof, args.accept))
    else:
        print(render.table(roof, args.accept))
    return 0


def print_frontier(at: Callable[[int], Roofline], batches: tuple[int, ...], accept: float | None,
                   fmt: str) -> int:
    """``--batch 1,2,4,...``: the roofline's per-user and aggregate rates at each batch."""
    from pytest_specbound.physics.frontier import frontier, table

    points = frontier(at, batches, accept)
    if fmt == "json":
        print(json.dumps({"accept": accept, "points": [p.to_json() for p in points]}, indent=2))
    else:
        print(table(points, accept))
    return 0


def add_roofline(sub: Any) -> None:
    p = sub.add_parser("roofline", help="per-round roofline breakdown")
    p.add_argument("--hw", required=True, help="hardware, e.g. a6000x2, h100x8, cpu, auto")
    p.add_argument("--hw-catalog", help="extra hardware TOML file")
    p.add_argument("--model", required=True, help="catalog name, config.json, folder or .gguf")
    p.add_argument("--dtype", help="weight dtype what-if (fp8, int4, ...)")
    p.add_argument("--spec", default="none", help="METHOD[:STEPS[:DRAFT_TOKENS]], e.g. mtp:3")
    p.add_argument("--draft-model", help="draft model for --spec draft / dflash")
    p.add_argument("--draft-dtype", help="the draft model's weight dtype, e.g. q8_0 (default: its "
                   "own: a catalog entry's, a GGUF's tensors); without --draft-model, the "
                   "MTP / EAGLE / DFlash head's (default bf16; MTP: the target's)")
    p.add_argument("--accept", type=positive_float, help="mean accept length (bonus included)")
    p.add_argument("--context", type=nonneg_int, default=500, help="context tokens (500)")
    p.add_argument("--batch", type=batch_list, default=(1,),
                   help="concurrent sequences (1); a list (1,2,4,...,64) prints the frontier: "
                        "per-user and aggregate tok/s at each batch")
    p.add_argument("--overhead-ms", type=float, default=None,
                   help="scheduler + sampling per round (default: --backend's figure)")
    p.add_argument("--backend", default=None,
                   help="serving engine whose per-round constant to use (sglang 0.5 ms, vllm "
                        "0.2 ms; others 0.5 ms assumed)")
    p.add_argument("--draft-step-ms", type=float, default=0.0,
                   help="the engine's own cost per draft forward, beyond the physics (0)")
    p.add_argument("--threads", type=positive_int,
                   help="--hw cpu: the server's compute threads (default: every core)")
    p.add_argument("--tp", type=positive_int, help="tensor-parallel GPUs per pipeline stage "
                   "(default: the GPUs over --pp)")
    p.add_argument("--pp", type=positive_int, help="pipeline stages (1)")
    p.add_argument("--ep", type=positive_int, help="expert-parallel GPUs: the routed experts "
                   "spread over them (1: split by TP)")
    p.add_argument("--dp-attention", action="store_true",
                   help="attention data-parallel across the TP group (SGLang "
                        "--enable-dp-attention)")
    p.add_argument("--overlap", action="store_true",
                   help="assume the all-to-all overlaps the other micro-batch (two-batch overlap)")
    p.add_argument("--nodes", type=positive_int,
                   help="nodes the GPUs span (default: the catalog's GPUs per node)")
    p.add_argument("--format", choices=FORMATS, default="table")
    p.set_defaults(func=cmd_roofline)
