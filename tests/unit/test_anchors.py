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


def test_the_two_part_draft_cost_recovers_an_engine_that_amortises_its_draft_phase():
    """Rows made by an engine paying 0.8 ms per drafting round plus 0.3 ms per forward above
    the roofline: fitted on its two fewest-step chains, the others are predicted exactly, where
    a cost per forward alone (fitted on the fewest) comes out pessimistic for longer chains."""
    from dataclasses import replace

    from pytest_specbound.physics.anchors import (
        SourceFidelity,
        evaluate,
        step_predictions,
        two_part_predictions,
    )

    def row(spec: str | None, accept: float = 1.0) -> dict:
        r = {"source": "synthetic", "group": "g", "hw": "h100", "model": "llama-3.1-8b",
             "tok_s": 1.0, "accept": accept}
        if spec:
            r["spec"] = spec
        return r

    def made(spec: str | None, accept: float) -> object:
        a = evaluate(row(spec, accept))
        steps = a.roofline.spec.steps if spec else 0
        round_ms = a.roofline.round_ms + 1.0 + (0.8 + 0.3 * steps if steps else 0.0)
        return replace(a, row={**a.row, "tok_s": accept / round_ms * 1e3})

    base = made(None, 1.0)
    chains = [made(f"eagle3:{k}", 1.5 + 0.3 * k) for k in (1, 2, 3, 5, 8)]
    source = SourceFidelity("g", base, chains)  # type: ignore[arg-type]
    two = two_part_predictions(source)
    assert [p.row.roofline.spec.steps for p in two] == [3, 5, 8]
    assert all(abs(p.predicted_efficiency - p.measured_efficiency) < 1e-9 for p in two)
    one = step_predictions(source)
    assert all(p.predicted_efficiency < p.measured_efficiency - 0.005 for p in one
               if p.row.roofline.spec.steps >= 5)


def _made(spec: str | None, accept: float, model: str = "llama-3.1-8b",
          extra_ms=lambda a: 0.0) -> object:
    """An anchor row whose measured round is its roofline plus 1 ms of engine excess plus
    ``extra_ms(anchor)`` of drafting."""
    from dataclasses import replace

    from pytest_specbound.physics.anchors import evaluate

    r = {"source": "synthetic", "group": "g", "hw": "h100", "model": model, "tok_s": 1.0,
         "accept": accept}
    if spec:
        r["spec"] = spec
    a = evaluate(r)
    round_ms = a.roofline.round_ms + 1.0 + extra_ms(a)
    return replace(a, row={**a.row, "tok_s": accept / round_ms * 1e3})


def test_trees_fit_and_predict_by_their_forwards_with_their_verify_in_the_roofline():
    """An engine paying 2 ms per drafting round plus 0.2 ms per draft forward, whatever the
    tree's width: rows at 3 steps (a chain and a tree, pooled) and at 6 fit both parts, and
    the trees at 7 and 8 steps with 15 and 59 nodes are predicted exactly (their wider verify
    is the roofline's); fitted on one chain alone, all per forward, they came out far under."""
    from pytest_specbound.physics.anchors import SourceFidelity, kind, two_part_predictions

    def cost(a):
        return 2.0 + 0.2 * a.roofline.spec.steps

    rows = [_made(s, acc, extra_ms=cost) for s, acc in
            (("eagle3:3", 2.0), ("eagle3:3:7", 2.3), ("eagle3:6:11", 2.5), ("eagle3:7:15", 2.6),
             ("eagle3:8:59", 3.2))]
    source = SourceFidelity("g", _made(None, 1.0), rows)  # type: ignore[arg-type]
    predicted = two_part_predictions(source)
    assert [p.row.roofline.spec.label for p in predicted] == ["eagle3:7:15", "eagle3:8:59"]
    assert {kind(p.row) for p in predicted} == {"tree"}
    assert all(abs(p.predicted_efficiency - p.measured_efficiency) < 1e-9 for p in predicted)
    assert predicted[0].fitted_on == "eagle3:3+eagle3:3:7 and eagle3:6:11"
    chain_only = SourceFidelity("g", source.baseline, [rows[0], rows[4]])
    (far,) = two_part_predictions(chain_only)  # one step count to fit on: the fixed part 0
    assert far.predicted_efficiency < far.measured_efficiency - 0.05, far


def test_a_block_is_predicted_on_another_model_from_its_drafters_roofline():
    """DFlash (one block forward however wide) on two models of one engine, its draft phase
    at three times its drafter's roofline time on both: fitted on the first model, the second
    is predicted exactly; a model with no row of the method is not predicted."""
    from pytest_specbound.physics.anchors import SourceFidelity, cross_model_predictions, kind

    def cost(a):
        return 3.0 * a.roofline.components_ms["draft"]

    big = SourceFidelity("g", _made(None, 1.0),  # type: ignore[arg-type]
                         [_made("dflash:15", 3.2, extra_ms=cost)])
    small = SourceFidelity("g", _made(None, 1.0, "qwen3-4b"),  # type: ignore[arg-type]
                           [_made("dflash:15", 2.3, "qwen3-4b", extra_ms=cost)])
    other = SourceFidelity("g", _made(None, 1.0, "qwen3-8b"),  # type: ignore[arg-type]
                           [_made("eagle3:3", 2.0, "qwen3-8b", extra_ms=cost)])
    (p,) = cross_model_predictions([big, small, other])
    assert kind(p.row) == "block" and p.row.row["model"] == "qwen3-4b"
    assert abs(p.predicted_efficiency - p.measured_efficiency) < 1e-9
    assert "x3.00" in p.fitted_on


def test_the_public_rows_predicted_per_kind_beat_a_cost_per_forward_alone():
    """bench/fidelity.py's held-back rows: chains, trees and a block each predicted, and more
    of them within 0.05 of their measured efficiency than the one-part cost gets."""
    from pytest_specbound.physics.anchors import (
        anchors,
        by_source,
        cross_model_predictions,
        kind,
        step_predictions,
        two_part_predictions,
    )

    sources = by_source(anchors())
    two = [p for s in sources for p in two_part_predictions(s)] + cross_model_predictions(sources)
    one = [p for s in sources for p in step_predictions(s)]

    def within(ps):
        return sum(abs(p.predicted_efficiency - p.measured_efficiency) <= 0.05 for p in ps)

    assert {kind(p.row) for p in two} == {"chain", "tree", "block"}
    assert within(two) / len(two) > within(one) / len(one), (within(two), len(two))
