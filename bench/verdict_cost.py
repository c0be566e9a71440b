"""Requests to a verdict, false failures and misses: the sequential rule vs fixed-N runs.

Per-request noise is drawn from a real llama-server run (bench/data/llama_server_noise.json,
recorded by bench/record_noise.py). Two truths: no regression (the floor 5% under the healthy rate) and a
true 10% regression (0.9x the healthy rate, 5% under the floor). Fixed-N runs are judged on their point
estimate at the defaults of the common benchmark tools: vLLM `bench serve --num-prompts` 1000,
SGLang `bench_serving --num-prompts` 1000 (GuideLLM bounds runs by time, not by a request count, so
it has no fixed N to compare with), plus small fixed counts for reference.
"""

from __future__ import annotations

import json
import random
import statistics
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from pytest_specbound.gate.budget import ClassBudget  # noqa: E402
from pytest_specbound.gate.simulate import run_fixed, run_sequential  # noqa: E402
from pytest_specbound.physics.hardware import parse_hardware  # noqa: E402
from pytest_specbound.physics.models import load_model  # noqa: E402
from pytest_specbound.physics.roofline import compute_roofline  # noqa: E402
from pytest_specbound.physics.speculative import parse_speculation  # noqa: E402

RUNS = 300
FLOOR = 0.70
MAX_SAMPLES = 250  # the sequential rule may use at most 1/4 of fixed-N=1000


def main() -> None:
    noise = json.loads((HERE / "data" / "llama_server_noise.json").read_text())
    ratios = noise["rate_ratios"]
    roof = compute_roofline(parse_hardware("a6000x2"), load_model("qwen3.6-27b"),
                            parse_speculation("mtp:3"))
    budget = ClassBudget("coding", "coding", 128, min_efficiency=FLOOR)
    accept = 3.0
    # the floor sits 5% under the healthy rate; a true 10% regression lands 5% under the floor
    healthy = FLOOR / 0.95 * roof.tok_s(accept)
    regressed = healthy * 0.9
    rng = random.Random(11)
    print(f"noise: {len(ratios)} llama-server requests, rate sd "
          f"{statistics.pstdev(ratios):.3f} ({noise['how']})")
    print(f"{'rule':<26} {'requests':>9} {'false fail':>11} {'missed':>8}")
    seq_ok = [run_sequential(rng, budget, roof, healthy, accept, 0, noise=ratios, tokens=128,
                             max_samples=MAX_SAMPLES) for _ in range(RUNS)]
    seq_bad = [run_sequential(rng, budget, roof, regressed, accept, 0, noise=ratios, tokens=128,
                              max_samples=MAX_SAMPLES) for _ in range(RUNS)]
    seq_n = statistics.mean([n for _, n in seq_ok + seq_bad])
    # inconclusive counts as a failure (the default --specbound-inconclusive=fail)
    seq_ff = sum(s != "pass" for s, _ in seq_ok) / RUNS
    seq_miss = sum(s == "pass" for s, _ in seq_bad) / RUNS
    unsure = sum(s == "inconclusive" for s, _ in seq_ok + seq_bad) / (2 * RUNS)
    print(f"{'sequential (0.95, <=250)':<26} {seq_n:>9.1f} {seq_ff:>11.3f} {seq_miss:>8.3f}"
          f"   ({unsure:.1%} inconclusive)")
    fixed = {}
    for n, label in ((10, "fixed N=10"), (50, "fixed N=50"),
                     (1000, "fixed N=1000 (vLLM/SGLang)")):
        runs = RUNS if n < 1000 else 60
        ok = [run_fixed(rng, budget, roof, healthy, accept, 0, n, 128, ratios) for _ in range(runs)]
        bad = [run_fixed(rng, budget, roof, regressed, accept, 0, n, 128, ratios)
               for _ in range(runs)]
        ff, miss = ok.count("fail") / runs, bad.count("pass") / runs
        fixed[n] = (ff, miss)
        print(f"{label:<26} {n:>9} {ff:>11.3f} {miss:>8.3f}")
    ratio = seq_n / 1000
    print(f"headline: sequential uses {ratio:.3f} of fixed-N=1000's requests "
          f"(target <= 0.25), false failures {seq_ff:.3f} vs {fixed[1000][0]:.3f}, "
          f"misses {seq_miss:.3f} vs {fixed[1000][1]:.3f}")


if __name__ == "__main__":
    main()
