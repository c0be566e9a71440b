"""Public measurements the roofline is checked against (``data/anchors.toml``).

Each row is one published decode rate per user with its hardware, model, dtype and, for a
speculative row, the method and the accept length the source reported; a row measured at
several sequences gives its ``batch`` and ``context``, and one split over GPUs its layout
(``tp``, ``pp``, ``ep``, ``dp_attention``, ``overlap``, ``nodes``). Rows of one source share
a ``group``; a group with speculative rows also has its no-speculation row, so the two
efficiencies can be set side by side (``bench/fidelity.py``).
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from importlib import resources

from pytest_specbound._toml import TomlTable, loads_toml
from pytest_specbound.physics.hardware import parse_hardware
from pytest_specbound.physics.layout import Layout
from pytest_specbound.physics.models import load_model
from pytest_specbound.physics.roofline import (
    DEFAULT_CONTEXT,
    Deployment,
    Roofline,
    compute_roofline,
)
from pytest_specbound.physics.speculative import parse_speculation

ANCHORS_PATH = "pytest_specbound/data/anchors.toml"
DEFAULT_MIN_RATIO = 0.35  # a measurement this far under its roofline means the model is wrong
LAYOUT_KEYS = ("tp", "pp", "ep", "dp_attention", "overlap")  # a row's split over its GPUs


@dataclass(frozen=True)
class Anchor:
    """One published measurement and the roofline at its accept length."""

    row: TomlTable
    roofline: Roofline

    @property
    def accept(self) -> float:
        return float(self.row.get("accept", 1.0))

    @property
    def expected_tok_s(self) -> float:
        return self.roofline.tok_s(self.accept)

    @property
    def efficiency(self) -> float:
        return float(self.row["tok_s"]) / self.expected_tok_s

    @property
    def speculative(self) -> bool:
        return self.roofline.spec.method != "none"

    @property
    def group(self) -> str:
        return str(self.row["group"])


def anchor_rows() -> list[TomlTable]:
    text = resources.files("pytest_specbound").joinpath("data/anchors.toml").read_text("utf-8")
    rows: list[TomlTable] = loads_toml(text, ANCHORS_PATH)["anchor"]
    return rows


def evaluate(row: TomlTable) -> Anchor:
    """The roofline of one anchor row, as a budget with the same fields would compute it."""
    model = load_model(row["model"], row.get("dtype"))
    if "expert_dtype" in row:
        model = model.with_expert_dtype(row["expert_dtype"])
    draft = load_model(row["draft_model"], row.get("draft_dtype")) if "draft_model" in row \
        else None
    hw = parse_hardware(row["hw"])
    if "nodes" in row:
        hw = hw.on_nodes(int(row["nodes"]), f"{ANCHORS_PATH}: nodes")
    layout = Layout(tp=int(row.get("tp", 0)), pp=int(row.get("pp", 1)), ep=int(row.get("ep", 1)),
                    dp_attention=bool(row.get("dp_attention", False)),
                    overlap=bool(row.get("overlap", False))).on(hw.count) \
        if any(k in row for k in LAYOUT_KEYS) else None
    deployment = Deployment(context=int(row.get("context", DEFAULT_CONTEXT)),
                            batch=int(row.get("batch", 1)), layout=layout)
    roof = compute_roofline(hw, model, parse_speculation(row.get("spec", "none")), draft,
                            deployment,
                            head_dtype=row.get("draft_dtype"))  # without a draft model: the head's
    return Anchor(row, roof)


def anchors() -> list[Anchor]:
    return [evaluate(row) for row in anchor_rows()]


@dataclass(frozen=True)
class SourceFidelity:
    """One source's no-speculation efficiency beside its speculative rows' on the same hardware,
    model and dtype."""

    group: str
    baseline: Anchor
    speculative: list[Anchor]

    @property
    def label(self) -> str:
        row = self.baseline.row
        return f"{self.group} {row['model']} {row.get('dtype') or self.baseline.roofline.model.dtype}"

    @property
    def gaps(self) -> list[float]:
        """Each speculative row's efficiency less the no-speculation row's."""
        return [a.efficiency - self.baseline.efficiency for a in self.speculative]

    @property
    def median_gap(self) -> float:
        return statistics.median(self.gaps)

    @property
    def excess_ms(self) -> float:
        """The engine's round above the roofline without drafting (its no-speculation row's)."""
        return _round_ms(self.baseline) - self.baseline.roofline.round_ms


def _setup(a: Anchor) -> tuple[str, str, str]:
    return a.row["hw"], a.row["model"], str(a.row.get("dtype") or "")


def by_source(rows: list[Anchor]) -> list[SourceFidelity]:
    """Per source and setup (hardware, model, dtype): the no-speculation row and the speculative
    rows beside it, in file order. Speculative rows without such a row are left out."""
    out = []
    for group in dict.fromkeys(a.group for a in rows):
        members = [a for a in rows if a.group == group]
        for base in (a for a in members if not a.speculative):
            spec = [a for a in members if a.speculative and _setup(a) == _setup(base)]
            if spec:
                out.append(SourceFidelity(group, base, spec))
    return out


@dataclass(frozen=True)
class StepPrediction:
    """One speculative row of a source predicted from the engine's cost per draft forward
    fitted on another row (``fitted_on``) of the same source and method: the round is the
    roofline's (physics only) plus the no-speculation row's own excess plus the forwards times
    the cost, as ``[roofline] draft_step_ms`` would make it."""

    source: str
    method: str
    fitted_on: str  # the row's speculation label, e.g. eagle3:2:4
    cost_ms: float
    row: Anchor
    predicted_efficiency: float

    @property
    def measured_efficiency(self) -> float:
        return self.row.efficiency


def _round_ms(a: Anchor) -> float:
    return a.accept / float(a.row["tok_s"]) * 1e3


def step_predictions(s: SourceFidelity) -> list[StepPrediction]:
    """Per method run at two or more step counts: the cost fitted on the fewest steps, every
    other step count predicted (efficiency against the physics-only roofline)."""
    from pytest_specbound.physics.roofline import draft_forwards

    excess = s.excess_ms  # the engine above physics, no drafting
    out = []
    for method in dict.fromkeys(a.roofline.spec.method for a in s.speculative):
        rows = [a for a in s.speculative if a.roofline.spec.method == method
                and draft_forwards(a.roofline.spec) > 0]
        if len({a.roofline.spec.steps for a in rows}) < 2:
            continue
        fit = min(rows, key=lambda a: (a.roofline.spec.steps, a.roofline.spec.draft_tokens))
        cost = (_round_ms(fit) - fit.roofline.round_ms - excess) \
            / draft_forwards(fit.roofline.spec)
        for a in rows:
            if a is fit:
                continue
            floor = a.roofline.round_ms
            predicted = floor / (floor + excess + draft_forwards(a.roofline.spec) * cost)
            out.append(StepPrediction(s.label, method, fit.roofline.spec.label, cost, a,
                                      predicted))
    return out


@dataclass(frozen=True)
class DraftCost:
    """An engine's cost of drafting above the roofline, per round: a fixed part per drafting
    round (launching the draft phase, gathering its tokens) and a part per draft forward, as
    engines amortise a draft phase. ``how`` says what it was fitted on."""

    fixed_ms: float
    per_forward_ms: float
    how: str

    def extra_ms(self, forwards: int) -> float:
        return self.fixed_ms + self.per_forward_ms * forwards if forwards else 0.0


def kind(a: Anchor) -> str:
    """chain, tree (verifies more tokens than it drafts steps) or block (DFlash)."""
    spec = a.roofline.spec
    if spec.method == "dflash":
        return "block"
    return "tree" if spec.draft_tokens > spec.steps else "chain"


def fit_draft_cost(fit: list[Anchor], excess: float) -> DraftCost:
    """From the rows of a method's two fewest step counts (rows at one count pooled by their
    mean): both parts (a negative slope is not physics: then the mean, all fixed); from one
    step count: all per forward, the fixed part assumed 0. A tree counts by its forwards, its
    verify width and node count being in its roofline (a draft forward's width is free where
    the drafter is memory-bound)."""
    from pytest_specbound.physics.roofline import draft_forwards

    counts: dict[int, list[Anchor]] = {}
    for a in fit:
        counts.setdefault(draft_forwards(a.roofline.spec), []).append(a)
    points = [(f, statistics.fmean(_round_ms(a) - a.roofline.round_ms - excess for a in rows),
               "+".join(dict.fromkeys(a.roofline.spec.label for a in rows)))
              for f, rows in sorted(counts.items())]
    if len(points) >= 2:
        (f1, e1, l1), (f2, e2, l2) = points[:2]
        slope = (e2 - e1) / (f2 - f1)
        if slope >= 0:
            return DraftCost(e1 - slope * f1, slope, f"{l1} and {l2}")
        return DraftCost((e1 + e2) / 2, 0.0, f"{l1} and {l2} (slope below 0: all fixed)")
    f1, e1, l1 = points[0]
    return DraftCost(0.0, e1 / f1, f"{l1} (fixed part assumed 0)")


def two_part_predictions(s: SourceFidelity) -> list[StepPrediction]:
    """Per method: the two-part cost fitted on the rows at its two fewest step counts (chains
    and trees alike, :func:`fit_draft_cost`), every row at another step count predicted."""
    from pytest_specbound.physics.roofline import draft_forwards

    excess = s.excess_ms
    out = []
    for method in dict.fromkeys(a.roofline.spec.method for a in s.speculative):
        rows = [a for a in s.speculative if a.roofline.spec.method == method
                and draft_forwards(a.roofline.spec) > 0]
        counts = sorted({draft_forwards(a.roofline.spec) for a in rows})
        if len(counts) < 2:
            continue
        fitted = set(counts[:2]) if len(counts) >= 3 else set(counts[:1])
        fit = [a for a in rows if draft_forwards(a.roofline.spec) in fitted]
        cost = fit_draft_cost(fit, excess)
        for a in rows:
            if draft_forwards(a.roofline.spec) in fitted:
                continue
            floor = a.roofline.round_ms
            predicted = floor / (floor + excess + cost.extra_ms(draft_forwards(a.roofline.spec)))
            out.append(StepPrediction(s.label, method, cost.how, cost.per_forward_ms, a,
                                      predicted))
    return out


def cross_model_predictions(sources: list[SourceFidelity]) -> list[StepPrediction]:
    """Per group, hardware, dtype and method run on several models (each beside its own
    no-speculation row): the drafting cost fitted on the first model's row as a multiple of
    its drafter's roofline time (the engine's draft phase at one efficiency, whatever the
    size), each other model's row predicted. This is how a block (DFlash: one forward however
    wide) is predicted where no source varied its width."""
    out = []
    by_setup: dict[tuple[str, str, str, str], list[tuple[SourceFidelity, Anchor]]] = {}
    for s in sources:
        for a in s.speculative:
            key = (s.group, a.row["hw"], str(a.row.get("dtype") or ""),
                   a.roofline.spec.label)
            by_setup.setdefault(key, []).append((s, a))
    for members in by_setup.values():
        models = {s.baseline.row["model"] for s, _ in members}
        if len(models) < 2:
            continue
        (s0, fit), rest = members[0], members[1:]
        draft0 = fit.roofline.components_ms["draft"]
        multiple = (_round_ms(fit) - fit.roofline.round_ms - s0.excess_ms) / draft0
        for s, a in rest:
            if s.baseline.row["model"] == s0.baseline.row["model"]:
                continue
            floor = a.roofline.round_ms
            extra = multiple * a.roofline.components_ms["draft"]
            out.append(StepPrediction(
                s.label, a.roofline.spec.method,
                f"{s0.baseline.row['model']} {fit.roofline.spec.label} (x{multiple:.2f} its draft)",
                extra, a, floor / (floor + s.excess_ms + extra)))
    return out
