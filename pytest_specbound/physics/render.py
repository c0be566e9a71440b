"""Text renderings of a roofline: the seed-style table with bars, and markdown."""

from __future__ import annotations

from collections.abc import Mapping

from pytest_specbound.physics.roofline import Roofline, draft_forwards

LABELS = {
    "weights": "target weight read",
    "kv_cache": "KV cache read",
    "linear_state": "linear-attention state read",
    "compute": "verify compute above memory time",
    "allreduce": "allreduce",
    "all_to_all": "all-to-all (experts)",
    "pipeline": "pipeline hand-offs",
    "draft": "draft",
    "overhead": "scheduler and sampling",
    "prefill": "other requests' prefill (measured)",
}
SHORT = {"weights": "weights", "kv_cache": "kv", "linear_state": "state", "compute": "compute",
         "allreduce": "allreduce", "all_to_all": "all-to-all", "pipeline": "pipeline",
         "draft": "draft", "overhead": "sched", "prefill": "prefill"}


def one_line(roof: Roofline) -> str:
    """``weights 35.2 | kv 0.0 | ... ms``, zero compute left out (it rarely applies at batch 1)."""
    return components_line(roof.components_ms)


def components_line(components_ms: Mapping[str, float]) -> str:
    """:func:`one_line` from the components alone (as a results file carries them)."""
    parts = [f"{SHORT.get(k, k)} {v:.1f}" for k, v in components_ms.items()
             if k != "compute" or v > 0]
    return " | ".join(parts) + " ms"


def _layout_detail(roof: Roofline, key: str) -> str | None:
    """A part's detail at a layout: per GPU, the slowest one's (None: as without a layout)."""
    layout, hw, m = roof.layout, roof.hardware, roof.model
    if layout is None:
        return None
    stage = f", {layout.pp} stages in turn" if layout.pp > 1 else ""
    if key == "weights":
        moe = ", the busiest EP rank's experts" if m.is_moe and layout.ep > 1 else \
            " (expected distinct experts)" if m.is_moe else ""
        return f"per GPU{moe} at {hw.bandwidth_gbs:g} GB/s{stage}"
    if key == "kv_cache":
        return f"context {roof.context} x batch {roof.batch}, per GPU"
    if key == "allreduce" and not roof.components_ms["allreduce"]:
        return "none: every layer runs data-parallel or expert-parallel" if layout.tp > 1 else ""
    if key == "allreduce":
        nodes = layout.nodes(hw.gpus_per_node)
        over = f"{hw.link}" + (f" + scale-out across {nodes} nodes" if
                               layout.tp > hw.gpus_per_node else "")
        return f"TP={layout.tp} over {over}" if layout.tp > 1 else ""
    if key == "all_to_all":
        return f"EP={layout.ep}, {m.moe_layers} MoE layers" + \
            (", overlapped (assumed)" if layout.overlap else "")
    if key == "pipeline":
        return f"PP={layout.pp}"
    return None


def _detail(roof: Roofline, key: str) -> str:
    hw, m = roof.hardware, roof.model
    at_layout = _layout_detail(roof, key)
    if at_layout is not None:
        return at_layout
    per_gpu = " per GPU" if hw.count > 1 else ""
    if key == "weights":
        moe = " (expected distinct experts)" if m.is_moe else ""
        return (f"{m.weight_bytes / hw.count / 1e9:.1f} GB{per_gpu} {m.dtype}{moe} at "
                f"{hw.bandwidth_gbs:g} GB/s")
    if key == "kv_cache":
        return f"context {roof.context} x batch {roof.batch}"
    if key == "allreduce" and hw.count > 1:
        return f"TP={hw.count} over {hw.link}, {2 * m.n_layers} per forward"
    if key == "draft":
        n = draft_forwards(roof.spec)
        forwards = f", {n} forward{'s' * (n != 1)} + acceptance" if n else ""
        engine = (f", {roof.draft_step_ms:g} ms engine cost per forward"
                  if roof.draft_step_ms and n else "")
        head = f", head {roof.head_dtype}" if roof.head_dtype else ""
        return f"{roof.spec.label}{forwards}{head}{engine}" if roof.spec.method != "none" else ""
    if key == "overhead" and roof.overhead_source:
        return roof.overhead_source.split(":")[0]  # the citation; the JSON has the whole text
    return ""


def table(roof: Roofline, accept: float | None = None) -> str:
    """Seed-style breakdown with a bar and a share per component."""
    total = roof.round_ms
    hw, m = roof.hardware, roof.model
    lines = [
        f"roofline: {m.name} ({m.dtype}) on {hw.label} [{hw.title}], spec {roof.spec.label}, "
        f"batch {roof.batch}, context {roof.context}",
        f"{'component':<34} {'ms':>8} {'share':>6}  ",
    ]
    for key, value in roof.components_ms.items():
        share = value / total if total else 0.0
        bar = "#" * round(share * 30)
        detail = _detail(roof, key)
        lines.append(f"{LABELS[key]:<34} {value:8.2f} {share:6.0%}  {bar:<30} {detail}".rstrip())
    lines.append(f"{'total per round':<34} {total:8.2f}")
    lines.append(f"bound: {roof.bound}")
    if roof.layout is not None:
        nodes = roof.layout.nodes(hw.gpus_per_node)
        lines.append(f"layout: {roof.layout.label()} on {roof.layout.gpus} GPUs"
                     + (f" across {nodes} nodes of {hw.gpus_per_node}" if nodes > 1 else "")
                     + "; each part is the slowest GPU's, per round")
        lines += [f"  {note}" for note in roof.notes]
    lines.append(
        f"ceiling at accept {roof.max_accept}: {roof.ceiling_tok_s:.1f} tok/s"
    )
    if accept is not None:
        lines.append(f"expected at accept {accept:g}: {roof.tok_s(accept):.1f} tok/s")
    return "\n".join(lines)


def markdown(roof: Roofline, accept: float | None = None) -> str:
    total = roof.round_ms
    rows = ["| component | ms | share |", "|---|---:|---:|"]
    rows += [f"| {LABELS[k]} | {v:.2f} | {v / total:.0%} |" for k, v in roof.components_ms.items()]
    rows.append(f"| **total per round** | **{total:.2f}** | |")
    a = roof.max_accept if accept is None else accept
    rows.append("")
    rows.append(f"ceiling {roof.ceiling_tok_s:.1f} tok/s; expected {roof.tok_s(a):.1f} tok/s at "
                f"accept {a:g}; bound: {roof.bound}")
    return "\n".join(rows)
