"""Data-driven: public measurements never exceed the roofline, and are not absurdly below it."""

from pathlib import Path

import pytest

from pytest_specbound._toml import load_toml
from pytest_specbound.physics.hardware import parse_hardware
from pytest_specbound.physics.models import load_model
from pytest_specbound.physics.roofline import compute_roofline
from pytest_specbound.physics.speculative import parse_speculation

ANCHORS = load_toml(Path(__file__).parent.parent / "data" / "anchors.toml")["anchor"]


@pytest.mark.parametrize("row", ANCHORS, ids=[a["source"][:60] for a in ANCHORS])
def test_anchor_within_roofline(row):
    draft = (load_model(row["draft_model"], row.get("draft_dtype"))
             if "draft_model" in row else None)
    roof = compute_roofline(
        parse_hardware(row["hw"]),
        load_model(row["model"], row.get("dtype")),
        parse_speculation(row.get("spec", "none")),
        draft,
    )
    expected = roof.tok_s(row.get("accept", 1.0))
    ratio = row["tok_s"] / expected
    assert ratio <= 1.0, f"{row['source']}: measured {row['tok_s']} above roofline {expected:.1f}"
    assert ratio >= row.get("min_ratio", 0.35), f"{row['source']}: {ratio:.2f} of {expected:.1f}"
