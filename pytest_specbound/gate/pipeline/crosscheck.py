"""The server's own settings against the budget: a mismatch names both and where each was read."""

from __future__ import annotations

from pytest_specbound.gate.schema.budget import Budget
from pytest_specbound.physics.hardware import Hardware
from pytest_specbound.serving.settings import Served


def _canonical(dtype: str) -> str:
    text = dtype.lower().replace("bfloat16", "bf16").replace("float16", "f16")
    return {"half": "f16", "fp16": "f16", "float": "f32", "float32": "f32", "fp32": "f32"}.get(
        text, text)


def mismatches(budget: Budget, hw: Hardware, served: Served) -> list[str]:
    """One sentence per setting the server runs differently from what the budget describes.

    Slots are not among them: a level above the server's slots is measured, and fails as "did
    not batch" naming them (the measurement shows what it costs)."""
    spec, src = budget.speculation, served.sources
    says = f"budget says {spec.label} ({budget.origin('spec')})"
    out: list[str] = []
    runs_none = served.speculative is False
    if spec.method != "none" and runs_none:
        out.append(f"{says}; the server runs no speculation ({src['speculative']})")
    if spec.method == "none" and served.speculative:
        what = served.method or "speculation"
        out.append(f"budget says no speculation ({budget.origin('spec')}); the server runs {what} "
                   f"({src.get('method') or src['speculative']})")
    if spec.method != "none" and not runs_none:
        if served.method and served.method != spec.method:
            out.append(f"{says}; the server runs {served.method} ({src['method']})")
        if served.draft_steps is not None and served.draft_steps != spec.steps:
            out.append(f"{says}; the server runs {served.draft_steps} draft steps "
                       f"({src['draft_steps']})")
        if served.draft_tokens is not None and served.draft_tokens != spec.draft_tokens:
            out.append(f"{says} ({spec.draft_tokens} draft tokens); the server verifies "
                       f"{served.draft_tokens} ({src['draft_tokens']})")
    gpus = served.instance_gpus
    if hw.name != "cpu" and gpus is not None and gpus != hw.count:
        parts = [f"TP {served.tp_size} ({src.get('tp_size')})"
                 if served.group_tp in (None, served.tp_size)
                 else f"{served.group_tp} GPUs a stage ({src['group_tp']})"]
        if (served.pp_size or 1) > 1:
            parts.append(f"PP {served.pp_size} ({src['pp_size']})")
        out.append(f"hardware {hw.label} has {hw.count} GPU{'s' * (hw.count != 1)}; the server "
                   "runs " + " x ".join(parts))
    out += layout_mismatches(budget, hw, served)
    if budget.threads is not None and served.threads is not None and budget.threads != served.threads:
        out.append(f"budget says {budget.threads} threads ({budget.origin('threads')}); the "
                   f"server runs {served.threads} ({src['threads']})")
    if budget.model.dtype and served.dtype and _canonical(budget.model.dtype) != _canonical(
            served.dtype):
        out.append(f"budget says dtype {budget.model.dtype}; the server runs {served.dtype} "
                   f"({src['dtype']})")
    return out


def layout_mismatches(budget: Budget, hw: Hardware, served: Served) -> list[str]:
    """The budget's ``[parallel]`` against the layout the server runs (where it says)."""
    if budget.layout is None or hw.name == "cpu":
        return []
    layout, src = budget.layout.on(hw.count), served.sources
    says = f"budget says {layout.label()} ({budget.origin('layout')})"
    group = served.group_tp if served.group_tp is not None else served.tp_size
    checks = (("tp", layout.tp, group, src.get("group_tp") or src.get("tp_size")),
              ("pp", layout.pp, served.pp_size, src.get("pp_size")),
              ("ep", layout.ep, served.ep_size, src.get("ep_size")),
              ("dp_attention", layout.dp_attention, served.dp_attention,
               src.get("dp_attention")))
    out = []
    for key, want, runs, where in checks:
        if runs is not None and runs != want:
            shown = ("DP attention" if runs else "no DP attention") if key == "dp_attention" \
                else f"{key.upper()} {runs}"
            out.append(f"{says}; the server runs {shown} ({where})")
    return out


def setting_findings(hw: Hardware, served: Served) -> list[tuple[str, str]]:
    """What the server runs that explains a slower system, as (kind, text) findings beside GPU
    telemetry's: eager mode on a GPU (CUDA graphs off: every kernel of every forward is launched
    from the host, a cost the roofline's scheduler constant assumes captured graphs avoid)."""
    if served.eager and hw.name != "cpu":
        return [("eager", "the server runs in eager mode, CUDA graphs off "
                          f"({served.sources.get('eager', 'server')}): each forward pays its "
                          "kernel launches, which the roofline assumes graphs remove")]
    return []


def above_roofline(roof_hw: Hardware, efficiency: float | None) -> str | None:
    """Why a server measured faster than its roofline is not physics, and what was likely
    measured; None under the ceiling. On this host's CPU a probe read slow (on a shared host, a
    neighbour's load when it was cached): its cached probes are dropped so the next run
    measures them again, and the sentence says so."""
    if efficiency is None or efficiency <= 1.0:
        return None
    if roof_hw.name == "cpu" and "SPECBOUND_CPU_BANDWIDTH_GBS" not in roof_hw.source:
        from pytest_specbound.physics.cpu_probe import forget_probes

        again = "they are measured again next run" if forget_probes() else \
            "they were measured in this run (the host's speed moved while it ran)"
        return (f"note: the server ran above this host's roofline (efficiency "
                f"{efficiency:.2f}): a CPU probe read slow; {again}")
    return (f"note: the server ran above its roofline (efficiency {efficiency:.2f}), which "
            "physics does not allow: the floor is set too high. Likely the hardware's "
            f"bandwidth ({roof_hw.bandwidth_gbs:g} GB/s per device, {roof_hw.source}) is below "
            "what it delivered, the model's bytes per round are fewer than the roofline reads "
            "(the weights' dtype, experts left unread), or not every token was decoded (a "
            "prefix cache answered, an accept count too high)")
