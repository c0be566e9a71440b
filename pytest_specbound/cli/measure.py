"""``specbound measure``: decode tok/s, accept length and TTFT of a server, outside a gate."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from pytest_specbound.cli.args import level, nonneg_int, positive_float


def cmd_measure(args: argparse.Namespace) -> int:
    from pathlib import Path

    from pytest_specbound.errors import ConfigError
    from pytest_specbound.measure.load import measure_at
    from pytest_specbound.measure.measurement import Stop
    from pytest_specbound.measure.prompts import default_max_tokens, load_set
    from pytest_specbound.measure.random_prompts import PREFIX, RandomProblem, RandomPrompts
    from pytest_specbound.measure.sampler import (
        DEFAULT_MAX_ACCEPT,
        FixedCount,
        Sampler,
        Stopping,
        Workload,
        requests_sent,
    )
    from pytest_specbound.physics.speculative import parse_speculation
    from pytest_specbound.serving.connect import ServerConfig, open_server

    max_accept = (parse_speculation(args.spec, origin="--spec").max_accept if args.spec
                  else DEFAULT_MAX_ACCEPT)
    try:
        random = RandomPrompts.parse(args.prompts) if args.prompts.startswith(PREFIX) else None
    except RandomProblem as exc:
        raise ConfigError(f"--prompts={args.prompts}: {exc}") from None
    # a conversation set's replies set the output lengths unless --max-tokens is given
    prompts = list(load_set(args.prompts, "--prompts", output_len=args.max_tokens).prompts) \
        if random is None else []
    max_tokens = args.max_tokens or (random.output if random else 0) \
        or default_max_tokens(args.prompts)
    cfg = ServerConfig(backend=args.backend, url=args.url, launch=args.launch,
                       ready_timeout_s=args.ready_timeout, api_key_env=args.api_key_env,
                       model_id=args.model_id, read_timeout_s=args.read_timeout,
                       ca_bundle=args.ca_bundle, origin="--url")
    server, backend = open_server(cfg, Path(args.log_dir), say=say)
    try:
        sampler = Sampler(server.endpoint, backend, args.model_id, max_accept)
        info = backend.info(server.endpoint)
        if random is not None:  # built with the server's own tokenizer
            from pytest_specbound.gate.pipeline.random_workload import random_prompts

            built = random_prompts(random, requests_sent(args.samples, args.concurrency,
                                                         args.warmup),
                                   backend.name, server.endpoint, args.model_id,
                                   info.model_path or args.url or "launched")
            say(built.note())
            prompts = list(built.prompts)
        workload = Workload(prompts, max_tokens, args.warmup)
        m = measure_at(sampler, args.concurrency, workload, Stopping(FixedCount(args.samples)),
                       info=info)
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


def say(line: str) -> None:
    print(f"specbound: {line}", file=sys.stderr, flush=True)


def add_measure(sub: Any) -> None:
    from pytest_specbound.serving.backends import BACKENDS

    p = sub.add_parser("measure", help="measure decode tok/s, accept length and TTFT")
    where = p.add_mutually_exclusive_group(required=True)
    where.add_argument("--url", help="attach to a running server")
    where.add_argument("--launch", help="launch command ({port}, {host} filled in)")
    p.add_argument("--backend", choices=BACKENDS, default="auto")
    p.add_argument("--prompts", default="coding",
                   help="coding|chat|repetitive|long, FILE.jsonl / FILE.json (ShareGPT: each "
                        "conversation's first turn), or random:input=N,output=N[,range=R,"
                        "prefix=N,seed=N]")
    p.add_argument("--samples", type=nonneg_int, default=8)
    p.add_argument("--warmup", type=nonneg_int, default=1,
                   help="uncounted requests (per stream with --concurrency)")
    p.add_argument("--concurrency", type=level, default=1,
                   help="closed-loop streams: each sends its next request when one ends")
    p.add_argument("--max-tokens", type=nonneg_int, help="output tokens per request")
    p.add_argument("--model-id", help="the 'model' field to send (default: none)")
    p.add_argument("--ready-timeout", type=positive_float, default=900.0)
    p.add_argument("--read-timeout", type=positive_float, default=120.0)
    p.add_argument("--api-key-env", help="environment variable holding the API key")
    p.add_argument("--ca-bundle", help="CA bundle for https (default: REQUESTS_CA_BUNDLE, "
                   "SSL_CERT_FILE, else certifi)")
    p.add_argument("--spec", help="the server's speculation, METHOD[:STEPS[:DRAFT_TOKENS]]: "
                   "how many tokens one verify step may emit (default: up to 8)")
    p.add_argument("--log-dir", default=".specbound/logs")
    p.add_argument("--format", choices=("table", "json"), default="table")
    p.set_defaults(func=cmd_measure)
