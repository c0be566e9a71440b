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


def test_draft_cost_fitted_on_one_step_count_predicts_every_other():
    """bench/fidelity.py's prediction table: every source that ran a drafting method at two or
    more step counts has each other row predicted; no prediction claims more than the roofline,
    and every fitted cost is positive (drafting costs each engine more than its physics)."""
    from pytest_specbound.physics.anchors import anchors, by_source, step_predictions
    from pytest_specbound.physics.roofline import draft_forwards

    sources = by_source(anchors())
    predicted = {(p.source, p.method) for s in sources for p in step_predictions(s)}
    expected = {(s.label, a.roofline.spec.method) for s in sources for a in s.speculative
                if draft_forwards(a.roofline.spec) > 0
                and len({b.roofline.spec.steps for b in s.speculative
                         if b.roofline.spec.method == a.roofline.spec.method}) >= 2}
    assert predicted == expected and len(expected) >= 4
    for s in sources:
        for p in step_predictions(s):
            assert 0 < p.predicted_efficiency <= 1.0 and p.cost_ms > 0, p
