"""The roofline against the public measurements in shared/reference/roofline-anchors.md.

Prints each anchor's efficiency (measured / roofline at its accept length) and the spread per
engine class. The rows are the same ones tests/unit/test_anchors.py asserts on.
"""

from __future__ import annotations

import statistics
from pathlib import Path

from pytest_specbound._toml import load_toml
from pytest_specbound.physics.hardware import parse_hardware
from pytest_specbound.physics.models import load_model
from pytest_specbound.physics.roofline import compute_roofline
from pytest_specbound.physics.speculative import parse_speculation

ANCHORS = Path(__file__).resolve().parents[1] / "tests" / "data" / "anchors.toml"
ENGINES = (("gpt-fast", "gpt-fast"), ("sgl", "SGLang"), ("EAGLE #211", "SGLang"),
           ("vLLM", "vLLM"), ("HF vanilla", "HF transformers"), ("llama.cpp", "llama.cpp"),
           ("fastertransformer", "FasterTransformer"))


def engine(source: str) -> str:
    for key, name in ENGINES:
        if key.lower() in source.lower():
            return name
    return "other"


def main() -> None:
    rows = []
    for a in load_toml(ANCHORS)["anchor"]:
        draft = load_model(a["draft_model"], a.get("draft_dtype")) if "draft_model" in a else None
        roof = compute_roofline(parse_hardware(a["hw"]), load_model(a["model"], a.get("dtype")),
                                parse_speculation(a.get("spec", "none")), draft)
        expected = roof.tok_s(a.get("accept", 1.0))
        rows.append((engine(a["source"]), a["hw"], a["model"], a.get("dtype", "-"),
                     a["tok_s"], expected, a["tok_s"] / expected))
    print(f"{'engine':<18} {'hardware':<12} {'model':<15} {'dtype':<9} {'measured':>9} "
          f"{'roofline':>9} {'eff':>6}")
    for r in sorted(rows):
        print(f"{r[0]:<18} {r[1]:<12} {r[2]:<15} {r[3]:<9} {r[4]:>9.1f} {r[5]:>9.1f} {r[6]:>6.2f}")
    print()
    print(f"{'engine class':<18} {'rows':>4} {'min':>6} {'median':>7} {'max':>6}")
    for name in sorted({r[0] for r in rows}):
        effs = [r[6] for r in rows if r[0] == name]
        print(f"{name:<18} {len(effs):>4} {min(effs):>6.2f} {statistics.median(effs):>7.2f} "
              f"{max(effs):>6.2f}")
    effs = [r[6] for r in rows]
    print(f"headline: median efficiency {statistics.median(effs):.2f} over {len(effs)} rows; "
          f"max {max(effs):.2f} (never above 1.00: the roofline is a ceiling)")


if __name__ == "__main__":
    main()
