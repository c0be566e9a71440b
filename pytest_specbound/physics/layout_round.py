"""One speculative round at a :class:`~pytest_specbound.physics.layout.Layout`: what the slowest
GPU reads, computes and waits for, each part per GPU and per round (a round crosses the pipeline
stages one after another, so each stage's time counts ``pp`` times over the instance).

The slowest GPU is the busiest expert-parallel rank: the step's tokens hit experts at random (the
router's balance is assumed uniform), and some rank holds more of the hit ones than the mean."""

from __future__ import annotations

from dataclasses import dataclass

from pytest_specbound.physics.allreduce import allreduce_us
from pytest_specbound.physics.geometry import Model
from pytest_specbound.physics.hardware import Hardware
from pytest_specbound.physics.layout import (
    HANDOFF_LATENCY_US,
    SCALE_OUT_LATENCY_US,
    Layout,
    all_to_all_us,
    busiest_share,
)

ACTIVATION_BYTES = 2  # bf16 hidden states between GPUs


@dataclass(frozen=True)
class LayoutRound:
    """The verify phase at a layout: components in ms per round, the matmuls' time, and what was
    assumed, one line each."""

    components_ms: dict[str, float]
    compute_total_ms: float
    notes: tuple[str, ...]


def _read_ms(num_bytes: float, hw: Hardware) -> float:
    return num_bytes / (hw.bandwidth_gbs * 1e9) * 1e3


def kv_share(model: Model, layout: Layout) -> float:
    """The share of the instance's KV cache one GPU reads: its stage's layers, its sequences'
    (DP attention) or its heads' (TP); an MLA latent is kept whole by every TP rank."""
    if layout.dp_attention or not model.latent_kv:
        return 1 / (layout.tp * layout.pp)
    return 1 / layout.pp


def kv_ms(hw: Hardware, model: Model, layout: Layout, context: float, batch: int) -> float:
    """The KV cache one GPU reads per round at ``layout`` (its share, each stage in turn)."""
    kv = model.kv_bytes_per_token * context * batch * kv_share(model, layout)
    return _read_ms(kv, hw) * layout.pp


def allreduce_ms(hw: Hardware, tp: int, message: float) -> tuple[float, str]:
    """One allreduce over the TP group (ms), and how it crosses nodes: inside a node over its
    link; across nodes, reduce-scatter inside, ring over the nodes' NICs (each GPU's NIC carries
    its 1/per_node share), all-gather inside."""
    if tp <= 1:
        return 0.0, ""
    per_node = min(tp, hw.gpus_per_node)
    inside = allreduce_us(hw.link, per_node, message, hw.link_gbs) if per_node > 1 else 0.0
    nodes = -(-tp // per_node)
    if nodes == 1:
        return inside / 1e3, ""
    ring = 2 * (nodes - 1) / nodes * (message / per_node) / (hw.scale_out_gbs * 1e9) * 1e6
    across = 2 * (nodes - 1) * SCALE_OUT_LATENCY_US + ring
    return (inside + across) / 1e3, (f"TP{tp} spans {nodes} nodes: each allreduce adds "
                                     f"{across:.1f} us over the scale-out network "
                                     f"({hw.scale_out_gbs:g} GB/s per GPU, "
                                     f"{SCALE_OUT_LATENCY_US:g} us a hop [assumed]; "
                                     f"{hw.scale_out_source})")


def layout_round(hw: Hardware, model: Model, layout: Layout, tokens: int, context: int,
                 batch: int, tflops: float) -> LayoutRound:
    """``tokens`` (batch x verify width) through the instance at ``layout`` on ``hw``."""
    tp, pp, ep = layout.tp, layout.pp, layout.ep
    notes: list[str] = []
    attention = model.attention_bytes
    routed = model.routed_bytes
    rest = model.weight_bytes - routed - attention  # dense MLPs, shared experts, embeddings
    # DP attention: attention, dense MLPs and shared experts run data-parallel as well, each GPU
    # holding them whole (SGLang's --moe-dense-tp-size 1 at large EP); only routed experts split
    stage_bytes = (rest + attention) / pp if layout.dp_attention else \
        (rest + attention) / (tp * pp)
    if model.is_moe:
        n, k = model.n_experts, model.experts_per_token
        p_hit = 1 - ((n - k) / n) ** tokens
        if ep > 1:
            local = -(-n // ep)  # as evenly as they go (EPLB's redundant copies fill the rest)
            busiest = busiest_share(local, p_hit, ep)
            stage_bytes += model.moe_layers / pp * busiest * model.expert_bytes / (tp // ep)
            notes.append(f"experts: {tokens} tokens hit {n * p_hit:.1f} of {n} per MoE layer; "
                         f"the busiest of {ep} EP ranks holds {busiest:.1f} of its {local} "
                         f"(mean {local * p_hit:.1f}): its read sets the round")
        else:
            stage_bytes += model.moe_layers / pp * n * p_hit * model.expert_bytes / tp
    kv_round_ms = kv_ms(hw, model, layout, context, batch)
    if model.latent_kv and not layout.dp_attention and tp > 1:
        notes.append(f"KV: the MLA latent cache is kept whole on each of the {tp} TP ranks "
                     "(DP attention would split it by sequence)")
    state = model.state_bytes * batch / (tp * pp)
    weights_ms, state_ms = _read_ms(stage_bytes, hw), _read_ms(state, hw)
    kv_stage_ms = kv_round_ms / pp
    compute_ms = 2 * model.active_params * tokens / (tflops * 1e12 * tp * pp) * 1e3 \
        if tflops else 0.0
    memory_ms = weights_ms + kv_stage_ms + state_ms
    # allreduces: attention's and each dense MLP's (none under DP attention), and a MoE layer's
    # where its experts are also split by TP
    message = model.hidden * tokens * ACTIVATION_BYTES
    one, how = allreduce_ms(hw, tp, message)
    moe_tp = tp // ep if ep > 1 else tp
    dense_layers = model.n_layers - model.moe_layers
    count = ((0 if layout.dp_attention else model.n_layers + dense_layers)
             + (model.moe_layers if moe_tp > 1 else 0)) / pp
    if layout.dp_attention:
        notes.append("DP attention: attention, dense MLPs and shared experts are held whole on "
                     "each GPU and run for its own sequences (no allreduce); routed experts "
                     "alone are split")
    allreduce = count * one
    if how and count:
        notes.append(how)
    components = {"weights": weights_ms * pp, "kv_cache": kv_round_ms,
                  "linear_state": state_ms * pp,
                  "compute": max(0.0, compute_ms - memory_ms) * pp,
                  "allreduce": allreduce * pp}
    if ep > 1:
        per_gpu_tokens = tokens / tp
        intra = ep <= hw.gpus_per_node
        dispatch, combine, source = all_to_all_us(per_gpu_tokens, model.experts_per_token,
                                                  model.hidden, ep, intra)
        exchange = model.moe_layers * (dispatch + combine) / 1e3  # ms per round
        if layout.overlap:
            hidden = min(exchange, memory_ms * pp)
            notes.append(f"all-to-all: {exchange:.2f} ms per round, overlapped with the other "
                         f"micro-batch's reads (two-batch overlap, assumed): "
                         f"{exchange - hidden:.2f} ms left over")
            exchange -= hidden
        else:
            notes.append(f"all-to-all: {model.moe_layers} MoE layers x (dispatch {dispatch:.0f} "
                         f"+ combine {combine:.0f} us) over "
                         f"{'NVLink' if intra else 'RDMA'}, not overlapped ({source})")
        components["all_to_all"] = exchange
    if pp > 1:
        handoff_bytes = tokens * model.hidden * ACTIVATION_BYTES
        cross = layout.gpus > hw.gpus_per_node
        gbs = hw.scale_out_gbs if cross else hw.link_gbs or hw.scale_out_gbs
        hop = HANDOFF_LATENCY_US / 1e3 + handoff_bytes / (gbs * 1e9) * 1e3
        components["pipeline"] = (pp - 1) * hop
        notes.append(f"PP{pp}: a round crosses its {pp} stages one after another (each GPU reads "
                     f"1/{pp} of the layers, the round reads them all), with {pp - 1} hand-offs "
                     f"of {hop * 1e3:.0f} us ({HANDOFF_LATENCY_US:g} us a hop [assumed])")
    return LayoutRound(components, compute_ms * pp, tuple(notes))
