"""Data-driven: public measurements never exceed the roofline and are not absurdly below it; the
speculative rows come with their source's no-speculation row."""

import pytest

from pytest_specbound.physics.anchors import DEFAULT_MIN_RATIO, anchor_rows, anchors, by_source

ROWS = anchor_rows()


@pytest.mark.parametrize("row", ROWS, ids=[r["source"][:70] for r in ROWS])
def test_anchor_within_roofline(row):
    from pytest_specbound.physics.anchors import evaluate

    anchor = evaluate(row)
    ratio = anchor.efficiency
    assert ratio <= 1.0, f"{row['source']}: measured {row['tok_s']} above {anchor.expected_tok_s:.1f}"
    assert ratio >= row.get("min_ratio", DEFAULT_MIN_RATIO), f"{row['source']}: {ratio:.2f}"


def test_speculative_anchors_cover_the_issue():
    """At least 15 speculative rows with accept lengths, from at least 4 sources, each source
    with its no-speculation row (#15)."""
    rows = anchors()
    spec = [a for a in rows if a.speculative]
    assert len(spec) >= 15 and all("accept" in a.row for a in spec)
    sources = by_source(rows)
    assert len(sources) >= 4
    assert {a.group for a in spec} == {s.group for s in sources}  # none without its baseline


def test_every_row_names_its_source_and_group():
    for row in ROWS:
        assert row["source"].strip() and row["group"].strip()
        assert row.get("accept", 1.0) >= 1.0
