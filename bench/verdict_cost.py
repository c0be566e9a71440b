"""Requests to a verdict and its error rates: the sequential rule vs the best fixed-size test.

Per cell (per-request noise x resolution): the truth sits exactly at the efficiency floor (a
healthy server: failing it is a false failure) or one resolution under it (a regression of that
size: passing it is a miss). Per-request noise is normal at 1% and 3% (GPU-like) or drawn from a
real llama-server run (bench/data/llama_server_noise.json, recorded by bench/record_noise.py).

Baselines, with the same alpha (0.05) and beta (0.05):
- best fixed N: the smallest N whose one-sided t-test (fail when the t statistic is under its
  critical value) fails a server at the floor at most alpha of the time and passes one a
  resolution under it at most beta of the time. The search starts at the N computed from the
  noise's sd (noncentral-t normal approximation) and is confirmed by simulation. On normal noise
  the critical value is Student's; on the skewed recorded noise a nominal t-test fails a healthy
  server 5.6-6.8% of the time at any N near these (more than alpha), so there the critical value
  is the simulated alpha-quantile of the t statistic on that noise: the best fixed t-test, given
  the noise's shape in advance (which the sequential rule is not);
The sequential rule is the product's (gate.rule.SequentialRule through gate.simulate), with its
default sample budget. Prints a table and a headline; runs in a few minutes on 2 cores.
"""

from __future__ import annotations

import json
import math
import random
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from statistics import NormalDist

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from pytest_specbound.gate.judging.simulate import Looks, SimulatedServer, run_sequential  # noqa: E402
from pytest_specbound.gate.schema.budget import ClassBudget  # noqa: E402
from pytest_specbound.measure.sequential import MIN_DECISION, MISS_RATE  # noqa: E402
from pytest_specbound.measure.stats import t_quantile  # noqa: E402
from pytest_specbound.physics.hardware import parse_hardware  # noqa: E402
from pytest_specbound.physics.models import load_model  # noqa: E402
from pytest_specbound.physics.roofline import compute_roofline  # noqa: E402
from pytest_specbound.physics.speculative import parse_speculation  # noqa: E402

RUNS = 1000  # per truth and cell: a 5% rate has a standard error of 0.7%
FIXED_RUNS = 20000
CALIBRATION_RUNS = 200000  # the alpha-quantile of the t statistic on the recorded noise
ALPHA = 0.05
FLOOR = 0.70
BUDGET = 64  # the default --specbound-samples
TARGET = 0.6  # the issue's headline: sequential / best fixed
Draw = Callable[[random.Random], float]


Noise = tuple[Draw, float, str, Sequence[float] | None]


def recorded() -> Noise:
    data = json.loads((HERE / "data" / "llama_server_noise.json").read_text())
    logs = [math.log(x) for x in data["rate_ratios"]]
    mean = statistics.fmean(logs)
    pool = [x - mean for x in logs]
    return (lambda r: r.choice(pool)), statistics.pstdev(pool), f"recorded ({len(pool)} req)", pool


def normal(sd: float) -> Noise:
    return (lambda r: r.gauss(0.0, sd)), sd, f"normal {sd:.0%}", None


def fixed_n_computed(sd: float, d: float) -> int:
    """Smallest N with one-sided t-test power >= 1 - beta at effect d (normal approximation
    of the noncentral t: power = Phi((ncp - t) / sqrt(1 + t^2 / (2 (N - 1)))))."""
    phi = NormalDist().cdf
    for n in range(2, 100_000):
        t = t_quantile(1 - ALPHA, n - 1)
        ncp = d * math.sqrt(n) / sd
        if phi((ncp - t) / math.sqrt(1 + t * t / (2 * (n - 1)))) >= 1 - MISS_RATE:
            return n
    raise RuntimeError("no fixed N found")


def within(rate: float) -> float:
    """``rate`` plus two standard errors of a rate simulated over FIXED_RUNS runs."""
    return rate + 2 * math.sqrt(rate * (1 - rate) / FIXED_RUNS)


def t_statistics(seed: int, pool: Sequence[float] | None, sd: float, mu: float,
                 n: int, runs: int) -> np.ndarray:
    """``runs`` t statistics of ``n`` requests whose log ratios are ``mu`` plus the noise."""
    gen = np.random.default_rng(seed)
    noise = gen.choice(np.asarray(pool), (runs, n)) if pool is not None \
        else gen.normal(0.0, sd, (runs, n))
    ys = mu + noise
    return ys.mean(axis=1) / (ys.std(axis=1, ddof=1) / math.sqrt(n))


def fixed_rates(seed: int, pool: Sequence[float] | None, sd: float, d: float,
                n: int) -> tuple[float, float, float]:
    """(critical value, simulated false failure, miss) of the fixed-N t-test: Student's
    critical value on normal noise, the simulated alpha-quantile on the recorded noise."""
    at = t_statistics(seed, pool, sd, 0.0, n, CALIBRATION_RUNS)
    crit = float(np.quantile(at, ALPHA)) if pool is not None else -t_quantile(1 - ALPHA, n - 1)
    at = t_statistics(seed + 1, pool, sd, 0.0, n, FIXED_RUNS)
    under = t_statistics(seed + 2, pool, sd, -d, n, FIXED_RUNS)
    return crit, float((at < crit).mean()), float((under >= crit).mean())


def peers_rates(rng: random.Random, draw: Draw, d: float, n: int = 1000) -> tuple[float, float]:
    """(false failure, miss) of a 1000-prompt run read on its point estimate (of the same
    parameter the tests use, the rates' geometric mean)."""
    runs, ff, miss = 200, 0, 0
    for _ in range(runs):
        for mu in (0.0, -d):
            fail = statistics.fmean(mu + draw(rng) for _ in range(n)) < 0
            ff += mu == 0 and fail
            miss += mu != 0 and not fail
    return ff / runs, miss / runs


def main() -> None:
    started = time.time()
    roof = compute_roofline(parse_hardware("a6000x2"), load_model("qwen3.6-27b"),
                            parse_speculation("mtp:3"))
    budget = ClassBudget("coding", "coding", 128, limits={"min_efficiency": FLOOR})
    floor_tok_s = FLOOR * roof.tok_s(3.0)
    rng = random.Random(11)
    print(f"alpha {ALPHA} (false failure at the floor), beta {MISS_RATE} (miss one resolution "
          f"under it); {RUNS} sequential runs per truth, {FIXED_RUNS} fixed")
    head = (f"{'noise':<20} {'res':>4} | {'seq req':>7} {'ff':>6} {'miss':>6} {'inc':>5} | "
            f"{'N calc':>6} {'N conf':>6} {'ff':>6} {'miss':>6} | {'1000: ff':>8} {'miss':>6} | "
            f"{'seq/fixed':>9}")
    print(head)
    print("-" * len(head))
    ratios: list[tuple[str, float, int]] = []
    for draw, sd, name, pool in (normal(0.01), normal(0.03), recorded()):
        for resolution in (0.05, 0.10):
            d = -math.log(1 - resolution)
            looks = Looks(max_samples=BUDGET, resolution=resolution)
            at = [run_sequential(rng, budget, roof, SimulatedServer(floor_tok_s, 3.0, 0.0, tokens=128,
                                                                    log_noise=draw), looks)
                  for _ in range(RUNS)]
            under = [run_sequential(rng, budget, roof,
                                    SimulatedServer(floor_tok_s * (1 - resolution), 3.0, 0.0,
                                                    tokens=128, log_noise=draw), looks)
                     for _ in range(RUNS)]
            seq_n = statistics.fmean(n for _, n in at + under)
            ff = sum(s == "fail" for s, _ in at) / RUNS
            miss = sum(s == "pass" for s, _ in under) / RUNS
            inc = sum(s == "inconclusive" for s, _ in at + under) / (2 * RUNS)
            n_calc = fixed_n_computed(sd, d)
            n_conf = max(2, n_calc - 2)  # the approximation may overshoot by a request or two
            _, f_ff, f_miss = fixed_rates(n_conf, pool, sd, d, n_conf)
            while f_miss > within(MISS_RATE) or f_ff > within(ALPHA):
                n_conf += 1
                _, f_ff, f_miss = fixed_rates(n_conf, pool, sd, d, n_conf)
            p_ff, p_miss = peers_rates(rng, draw, d)
            ratio = seq_n / n_conf
            ratios.append((f"{name} {resolution:.0%}", ratio, n_conf))
            print(f"{name:<20} {resolution:>4.0%} | {seq_n:>7.1f} {ff:>6.3f} {miss:>6.3f} "
                  f"{inc:>5.1%} | {n_calc:>6} {n_conf:>6} {f_ff:>6.3f} {f_miss:>6.3f} | "
                  f"{p_ff:>8.3f} {p_miss:>6.3f} | {ratio:>9.2f}")
    sized = [(cell, r) for cell, r, n in ratios if n >= 10]
    small = [(cell, r, n) for cell, r, n in ratios if n < 10]
    worst = max(r for _, r in sized) if sized else float("nan")
    met = [c for c, r in sized if r <= TARGET]
    missed = [c for c, r in sized if r > TARGET]
    print(f"headline: sequential / best fixed, where the fixed test needs 10+ requests: worst "
          f"{worst:.2f} (target {TARGET}: met in {len(met)} of {len(sized)} cells"
          + (f"; not met: {', '.join(missed)}" if missed else "") + ")")
    if small:
        print("  where the fixed test needs under 10 ("
              + ", ".join(f"{c}: {n} fixed, ratio {r:.2f}" for c, r, n in small) + "), the rule "
              f"stops at its minimum of {MIN_DECISION} requests: a noise estimate needs several "
              "requests, and no single request may decide alone (a stall); a fixed test that "
              "knows neither needs as few as 2-6. Fewer requests there would need the noise "
              "known in advance, which the fixed baseline does not get either")
    print(f"  1000-prompt runs read on their point estimate fail a server at its floor about "
          f"half the time, at 1000 requests each ({time.time() - started:.0f} s)")


if __name__ == "__main__":
    main()
