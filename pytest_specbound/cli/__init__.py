"""``specbound``: roofline, hw, measure, calibrate, report, compare, history. Errors are one
line, exit status 2."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from pytest_specbound.errors import SpecboundError
from pytest_specbound.values import ValueProblem, levels, levels_text, number, whole_number

if TYPE_CHECKING:
    from pytest_specbound.physics.roofline import Roofline

FORMATS = ("table", "json", "markdown")
T = TypeVar("T")


def _arg(rule: Callable[[str], T]) -> Callable[[str], T]:
    """An argparse type from a value rule of :mod:`pytest_specbound.values`."""
    def parse(text: str) -> T:
        try:
            return rule(text)
        except ValueProblem as exc:
            raise argparse.ArgumentTypeError(f"{exc}, got {text!r}") from None
    return parse


_positive_float = _arg(lambda text: number(text, 0.0, open_low=True))
_positive_int = _arg(lambda text: whole_number(text, 1))
_nonneg_int = _arg(lambda text: whole_number(text, 0))
_level = _arg(lambda text: levels([whole_number(text, 1)])[0])


def hardware_from_args(spec: str, catalog_file: str | None, origin: str = "--hw") -> Any:
    from pytest_specbound.physics.hardware import resolve_hardware

    return resolve_hardware(spec, catalog_file, origin)


ROOFLINE_FLAGS = {"spec": "--spec", "draft_model": "--draft-model", "draft_dtype": "--draft-dtype",
                  "batch": "--batch",
                  "context": "--context", "overhead_ms": "--overhead-ms",
                  "draft_step_ms": "--draft-step-ms"}


def cmd_roofline(args: argparse.Namespace) -> int:
    from pytest_specbound.physics import render
    from pytest_specbound.physics.dtypes import canonical_dtype
    from pytest_specbound.physics.models import load_model
    from pytest_specbound.physics.roofline import compute_roofline
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

    overhead, source = ((args.overhead_ms, "--overhead-ms") if args.overhead_ms is not None
                        else overhead_for(args.backend))
    def at(batch: int) -> Roofline:
        return compute_roofline(hw, model, spec, draft, args.context, batch, overhead,
                                ROOFLINE_FLAGS, args.draft_step_ms, draft_dtype, source)

    if len(args.batch) > 1:
        return print_frontier(at, args.batch, args.accept, args.format)
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


def _batches(text: str) -> tuple[int, ...]:
    """``4`` or ``1,2,4,8`` (a batch under 1 is left to the roofline's own one-line error)."""
    if "," not in text:
        return (_nonneg_int(text),)
    try:
        return levels_text(text)
    except ValueProblem as exc:
        raise argparse.ArgumentTypeError(f"{exc}: a batch or a list, e.g. 1,2,4,8") from None


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


def _add_models(sub: Any) -> None:
    p = sub.add_parser("models", help="list the model catalog (weights read per forward pass)")
    p.add_argument("--format", choices=("table", "json"), default="table")
    p.set_defaults(func=cmd_models)


def _add_roofline(sub: Any) -> None:
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
    p.add_argument("--accept", type=_positive_float, help="mean accept length (bonus included)")
    p.add_argument("--context", type=_nonneg_int, default=500, help="context tokens (500)")
    p.add_argument("--batch", type=_batches, default=(1,),
                   help="concurrent sequences (1); a list (1,2,4,...,64) prints the frontier: "
                        "per-user and aggregate tok/s at each batch")
    p.add_argument("--overhead-ms", type=float, default=None,
                   help="scheduler + sampling per round (default: --backend's figure)")
    p.add_argument("--backend", default=None,
                   help="serving engine whose per-round constant to use (sglang 0.5 ms, vllm "
                        "0.2 ms; others 0.5 ms assumed)")
    p.add_argument("--draft-step-ms", type=float, default=0.0,
                   help="the engine's own cost per draft forward, beyond the physics (0)")
    p.add_argument("--threads", type=_positive_int,
                   help="--hw cpu: the server's compute threads (default: every core)")
    p.add_argument("--format", choices=FORMATS, default="table")
    p.set_defaults(func=cmd_roofline)


def _add_hw(sub: Any) -> None:
    p = sub.add_parser("hw", help="list the hardware catalog, or --detect through NVML")
    p.add_argument("--detect", action="store_true")
    p.add_argument("--format", choices=("table", "json"), default="table")
    p.set_defaults(func=cmd_hw)


SUBCOMMANDS: list[Callable[[Any], None]] = [_add_roofline, _add_hw, _add_models]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="specbound", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    for add in SUBCOMMANDS:
        add(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.func(args))
    except SpecboundError as exc:
        print(f"specbound: error: {exc}", file=sys.stderr)
        return 2
    except BrokenPipeError:  # output piped into head & co.
        return 0
    except KeyboardInterrupt:
        print("specbound: interrupted", file=sys.stderr)
        return 130



def cmd_measure(args: argparse.Namespace) -> int:
    from pathlib import Path

    from pytest_specbound.measure.measurement import Stop
    from pytest_specbound.measure.prompts import default_max_tokens, load_prompts
    from pytest_specbound.measure.sampler import DEFAULT_MAX_ACCEPT, FixedCount, Sampler, measure
    from pytest_specbound.physics.speculative import parse_speculation
    from pytest_specbound.serving.connect import ServerConfig, open_server

    max_accept = (parse_speculation(args.spec, origin="--spec").max_accept if args.spec
                  else DEFAULT_MAX_ACCEPT)
    prompts = load_prompts(args.prompts, "--prompts")
    max_tokens = args.max_tokens or default_max_tokens(args.prompts)
    cfg = ServerConfig(backend=args.backend, url=args.url, launch=args.launch,
                       ready_timeout_s=args.ready_timeout, api_key_env=args.api_key_env,
                       model_id=args.model_id, read_timeout_s=args.read_timeout,
                       ca_bundle=args.ca_bundle, origin="--url")
    server, backend = open_server(cfg, Path(args.log_dir), say=_say)
    try:
        sampler = Sampler(server.endpoint, backend, args.model_id, max_accept)
        info = backend.info(server.endpoint)
        if args.concurrency == 1:
            m = measure(sampler, prompts, max_tokens, FixedCount(args.samples), args.warmup,
                        info=info)
        else:
            from pytest_specbound.measure.load import (
                CounterWindow,
                measure_closed_loop,
                stream_samplers,
            )

            m = measure_closed_loop(stream_samplers(sampler, args.concurrency), prompts,
                                    max_tokens, FixedCount(args.samples), args.warmup, info=info,
                                    window=CounterWindow(backend, server.endpoint))
    finally:
        server.stop()
    if args.format == "json":
        print(json.dumps(m.to_json(), indent=2))
    else:
        from pytest_specbound.report.table import measurement_text

        print(measurement_text(m))
    if m.decode_tok_s is None or m.stop is Stop.UNTIMED:
        why = m.untimed_note() if m.stop is Stop.UNTIMED else None
        print("specbound: error: " + (why or m.failure_note() or m.untimed_note()
                                      or "no request could be timed"), file=sys.stderr)
        return 1
    return 1 if m.failures else 0


def _say(line: str) -> None:
    print(f"specbound: {line}", file=sys.stderr, flush=True)


def _fmt(value: float | None, spec: str = ".2f") -> str:
    return "n/a" if value is None else format(value, spec)


def _add_measure(sub: Any) -> None:
    from pytest_specbound.serving.backends import BACKENDS

    p = sub.add_parser("measure", help="measure decode tok/s, accept length and TTFT")
    where = p.add_mutually_exclusive_group(required=True)
    where.add_argument("--url", help="attach to a running server")
    where.add_argument("--launch", help="launch command ({port}, {host} filled in)")
    p.add_argument("--backend", choices=BACKENDS, default="auto")
    p.add_argument("--prompts", default="coding", help="coding|chat|repetitive|long or FILE.jsonl")
    p.add_argument("--samples", type=_nonneg_int, default=8)
    p.add_argument("--warmup", type=_nonneg_int, default=1,
                   help="uncounted requests (per stream with --concurrency)")
    p.add_argument("--concurrency", type=_level, default=1,
                   help="closed-loop streams: each sends its next request when one ends")
    p.add_argument("--max-tokens", type=_nonneg_int, help="output tokens per request")
    p.add_argument("--model-id", help="the 'model' field to send (default: none)")
    p.add_argument("--ready-timeout", type=_positive_float, default=900.0)
    p.add_argument("--read-timeout", type=_positive_float, default=120.0)
    p.add_argument("--api-key-env", help="environment variable holding the API key")
    p.add_argument("--ca-bundle", help="CA bundle for https (default: REQUESTS_CA_BUNDLE, "
                   "SSL_CERT_FILE, else certifi)")
    p.add_argument("--spec", help="the server's speculation, METHOD[:STEPS[:DRAFT_TOKENS]]: "
                   "how many tokens one verify step may emit (default: up to 8)")
    p.add_argument("--log-dir", default=".specbound/logs")
    p.add_argument("--format", choices=("table", "json"), default="table")
    p.set_defaults(func=cmd_measure)


SUBCOMMANDS.append(_add_measure)



def cmd_calibrate(args: argparse.Namespace) -> int:
    import difflib
    from dataclasses import replace
    from pathlib import Path

    from pytest_specbound._toml import read_text
    from pytest_specbound.atomic import write_text
    from pytest_specbound.gate.budget import load_budget
    from pytest_specbound.gate.calibrate import measure_budget, proposed_text
    from pytest_specbound.gate.pool import ServerPool
    from pytest_specbound.gate.settings import resolve

    budget = load_budget(args.budget)
    hw = hardware_from_args(args.hw, None)
    # one look at the full sample count: the interval at the plain confidence level
    settings = resolve({"specbound_url": args.url, "specbound_samples": str(args.samples),
                        "specbound_min_samples": str(args.samples),
                        "specbound_concurrency": args.concurrency,
                        "specbound_speedup": "1" if args.speedup else None},
                       {}, lambda name: None)
    budget = budget.for_hardware(hw.label)
    pool = ServerPool(Path(args.log_dir))
    text = read_text(args.budget)
    runs = [(name, replace(cls, concurrency=settings.concurrency or cls.concurrency))
            for name, cls in budget.classes.items()]
    try:
        results = measure_budget(budget, hw, settings, pool, runs,
                                 lambda line: print(f"specbound: {line}", file=sys.stderr))
    finally:
        pool.close()
    new = proposed_text(text, budget, hw.label, runs, results,
                        lambda line: print(line, file=sys.stderr))
    diff = difflib.unified_diff(text.splitlines(keepends=True), new.splitlines(keepends=True),
                                args.budget, args.budget + " (proposed)")
    sys.stdout.writelines(diff)
    if args.write:
        write_text(Path(args.budget), new)
        print(f"wrote {args.budget}: review the change before committing it", file=sys.stderr)
    return 0


def cmd_report(args: argparse.Namespace) -> int:
    from pathlib import Path

    from pytest_specbound.report.results import read_results
    from pytest_specbound.report.table import markdown, terminal

    results = [r for path in args.files for r in read_results(Path(path))]
    print(markdown(results) if args.format == "markdown" else terminal(results))
    if args.plot:
        from pytest_specbound.report.plot import write_plot

        write_plot(Path(args.plot), results)
    return 1 if any(r.status not in ("pass", "skip") for r in results) else 0


def _add_calibrate(sub: Any) -> None:
    p = sub.add_parser("calibrate", help="measure a budget and propose bands and floors")
    p.add_argument("budget")
    p.add_argument("--hw", required=True)
    p.add_argument("--url", help="attach instead of launching the budget's command")
    p.add_argument("--samples", type=_nonneg_int, default=20)
    p.add_argument("--concurrency", help="levels to calibrate, e.g. 1,4 (default: the budget's)")
    p.add_argument("--log-dir", default=".specbound/logs")
    p.add_argument("--write", action="store_true", help="rewrite the budget (default: diff only)")
    p.add_argument("--speedup", action="store_true",
                   help="also measure the server without speculation: the speedup, and the "
                        "engine's cost per draft forward proposed as [roofline] draft_step_ms")
    p.set_defaults(func=cmd_calibrate)


def _add_report(sub: Any) -> None:
    p = sub.add_parser("report", help="merge results JSON files from several runners")
    p.add_argument("files", nargs="+")
    p.add_argument("--format", choices=("table", "markdown"), default="table")
    p.add_argument("--plot", help="write the plot of every merged run, a row of panels per "
                   "hardware (PNG)")
    p.set_defaults(func=cmd_report)


from pytest_specbound.cli.runs import add_runs  # noqa: E402  (a subcommand module)

SUBCOMMANDS += [_add_calibrate, _add_report, add_runs]

