"""The roofline of one speculative round: per-component times, ceiling and expected tok/s.

Batch-1 decode reads every target weight once per verify step whatever the number of tokens
verified, so ``tok/s = accept_length / round_time``. The batch ``B`` enters as tokens per step
(compute, MoE expert coverage, allreduce message) and as per-sequence KV and state reads.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields, replace
from typing import Any

from pytest_specbound.errors import ConfigError
from pytest_specbound.physics import dtypes
from pytest_specbound.physics.allreduce import allreduce_us
from pytest_specbound.physics.geometry import Model
from pytest_specbound.physics.hardware import Hardware
from pytest_specbound.physics.layout import Layout
from pytest_specbound.physics.layout_round import kv_ms, layout_round
from pytest_specbound.physics.speculative import Speculation

ORIGIN_KEYS = ("spec", "draft_model", "draft_dtype", "batch", "context", "overhead_ms",
               "draft_step_ms", "layout")
COMPONENTS = ("weights", "kv_cache", "linear_state", "compute", "allreduce", "draft", "overhead")
DEFAULT_CONTEXT = 500  # the seed profile's sequence length
DEFAULT_OVERHEAD_MS = 0.5  # scheduler and sampling per round (seed profile)
EAGLE3_DRAFT_VOCAB = 32000  # EAGLE-3 drafters predict over a reduced vocabulary
DFLASH_LAYERS = 5  # a DFlash block drafter is a few target-shaped layers, one forward per round
# Each draft step is a forward of its own; a kernel on a GPU takes at least a few microseconds
# however little it reads (aiconfigurator's systems/*.yaml: mem_empirical_constant_latency 3 us
# per memory op, NVIDIA's correction from observations). Kernels of a fused decoder layer: qkv,
# rope + KV write, attention, o-proj, add + norm, gate-up, activation, down, add + norm; and per
# forward: embedding, final norm, LM head, top-k / argmax. The target's kernels read hundreds of
# MB each, so this floor binds only the drafters' small forwards.
OP_FLOOR_MS = 0.003
OPS_PER_LAYER = 9
OPS_PER_FORWARD = 4
LOGIT_BYTES = 4  # fp32 logits, read once by the acceptance step for every verified position


def _ms(num_bytes: float, hw: Hardware) -> float:
    return num_bytes / (hw.bandwidth_gbs * 1e9 * hw.count) * 1e3


def expected_distinct_experts(n_experts: int, top_k: int, tokens: int) -> float:
    """Expected distinct experts hit by ``tokens`` routings of ``top_k`` each: N(1-((N-k)/N)^T)."""
    return n_experts * (1 - ((n_experts - top_k) / n_experts) ** tokens)


@dataclass(frozen=True)
class Deployment:
    """How the model is served, beside what is served: the context and batch each round runs at,
    the engine's per-round constant (and where it came from), and its own cost per draft
    forward beyond the physics (measured by the team, not a floor: 0 keeps the roofline a
    ceiling)."""

    context: int = DEFAULT_CONTEXT
    batch: int = 1
    overhead_ms: float = DEFAULT_OVERHEAD_MS  # scheduler and sampling per round
    draft_step_ms: float = 0.0
    overhead_source: str = ""  # where overhead_ms came from
    # how one instance is split over GPUs and nodes (None: tensor parallelism over them all)
    layout: Layout | None = None


DEPLOYMENT_KEYS = tuple(f.name for f in fields(Deployment))
DEFAULT_DEPLOYMENT = Deployment()


@dataclass(frozen=True)
class Roofline:
    """One speculative round on ``hardware`` for ``model`` with ``spec``."""

    hardware: Hardware
    model: Model
    spec: Speculation
    components_ms: dict[str, float]
    bound: str  # "memory" or "compute": which limits the verify phase
    context: int
    batch: int
    draft_model: Model | None = None
    draft_step_ms: float = 0.0  # the engine's own cost per draft forward, given by the budget
    overhead_source: str = ""  # where the scheduler constant came from
    head_dtype: str | None = None  # an MTP / EAGLE / DFlash head stored apart from bf16
    verify_compute_ms: float = 0.0  # the verify forward's matmuls at the compute ceiling
    prefill_ms_per_token: float = 0.0  # one prompt token's matmuls at the prefill ceiling
    layout: Layout | None = None  # the split over GPUs and nodes, where one was modelled
    notes: tuple[str, ...] = ()  # what the layout's parts assumed, one line each

    @property
    def round_ms(self) -> float:
        return sum(self.components_ms.values())

    @property
    def deployment(self) -> Deployment:
        """The serving side this round was computed for (what :meth:`what_if` keeps)."""
        return Deployment(self.context, self.batch, self.components_ms["overhead"],
                          self.draft_step_ms, self.overhead_source, self.layout)

    @property
    def compute_slack_ms(self) -> float:
        """Per round, the time a memory-bound verify leaves the compute units idle: prompt
        tokens of other requests batched into the round can be multiplied in it for free."""
        memory = sum(self.components_ms[k] for k in ("weights", "kv_cache", "linear_state"))
        return max(0.0, memory - self.verify_compute_ms)

    def prefill_ms(self, tokens: float, rounds: float) -> float:
        """The least time ``tokens`` prompt tokens of other requests add to ``rounds`` rounds
        they share (continuous batching puts a newcomer's prefill into the running rounds):
        their matmuls at the prefill ceiling, less what the rounds' compute slack absorbs."""
        return max(0.0, tokens * self.prefill_ms_per_token - rounds * self.compute_slack_ms)

    def at_context(self, context: float) -> Roofline:
        """This round at another context length: the KV cache read follows it (per sequence,
        for every sequence of the batch), and the verify's compute still overlaps the memory
        read; the drafter's own KV is left as it was (a small share of its read)."""
        if round(context) == self.context or context < 0:
            return self
        c = self.components_ms
        kv = kv_ms(self.hardware, self.model, self.layout, context, self.batch) if self.layout \
            else _ms(self.model.kv_bytes_per_token * context * self.batch, self.hardware)
        memory = c["weights"] + kv + c["linear_state"]
        return replace(self, context=round(context), components_ms={
            **c, "kv_cache": kv, "compute": max(0.0, self.verify_compute_ms - memory)})

    def with_prefill(self, ms_per_round: float) -> Roofline:
        """This round with other requests' prefill added (``prefill``, measured per level)."""
        if ms_per_round <= 0:
            return self
        return replace(self, components_ms={**self.components_ms, "prefill": ms_per_round})

    @property
    def max_accept(self) -> int:
        return self.spec.max_accept

    @property
    def ceiling_tok_s(self) -> float:
        """Tokens per second per sequence when every draft is accepted."""
        return self.tok_s(self.max_accept)

    def tok_s(self, accept: float) -> float:
        """Roofline decode tok/s per sequence at mean accept length ``accept``."""
        return accept / self.round_ms * 1e3

    def what_if(self, **changes: Any) -> Roofline:
        """Recompute with another ``dtype``, ``hardware``, ``spec``, ``context`` or ``batch`` (or
        any other :class:`Deployment` field)."""
        dtype = changes.pop("dtype", None)
        model = self.model.with_dtype(dtype) if dtype else self.model
        deployment = replace(self.deployment,
                             **{k: changes.pop(k) for k in DEPLOYMENT_KEYS if k in changes})
        args: dict[str, Any] = {
            "hardware": self.hardware, "model": model, "spec": self.spec,
            "draft_model": self.draft_model, "deployment": deployment,
            "head_dtype": self.head_dtype,
        }
        args.update(changes)
        return compute_roofline(**args)

    def to_dict(self, accept: float | None = None) -> dict[str, object]:
        """The roofline as ``specbound roofline --format json`` prints it."""
        a = self.max_accept if accept is None else accept
        return {
            "round_ms": round(self.round_ms, 4),
            "components_ms": {k: round(v, 4) for k, v in self.components_ms.items()},
            "ceiling_tok_s": round(self.ceiling_tok_s, 3),
            "accept": a,
            "max_accept": self.max_accept,
            "expected_tok_s": round(self.tok_s(a), 3),
            "bound": self.bound,
            "speculative": self.spec.label,
            "context": self.context,
            "batch": self.batch,
            "hardware": self.hardware.describe(),
            "model": self.model.describe(),
            "draft_model": self.draft_model.describe() if self.draft_model else None,
            "draft_forwards": draft_forwards(self.spec),
            "draft_step_ms": self.draft_step_ms,
            "head_dtype": self.head_dtype,
            "overhead_source": self.overhead_source,
            **({"layout": {"tp": self.layout.tp, "pp": self.layout.pp, "ep": self.layout.ep,
                           "dp_attention": self.layout.dp_attention,
                           "overlap": self.layout.overlap,
                           "nodes": self.layout.nodes(self.hardware.gpus_per_node),
                           "label": self.layout.label()},
                "notes": list(self.notes)} if self.layout else {}),
        }


def _verify(hw: Hardware, model: Model, tokens: int, context: int, batch: int) -> dict[str, float]:
    dense = model.weight_bytes - model.routed_bytes
    experts = 0.0
    if model.is_moe:
        hit = expected_distinct_experts(model.n_experts, model.experts_per_token, tokens)
        experts = model.moe_layers * hit * model.expert_bytes
    weights = _ms(dense + experts, hw)
    kv = _ms(model.kv_bytes_per_token * context * batch, hw)
    state = _ms(model.state_bytes * batch, hw)
    return {"weights": weights, "kv_cache": kv, "linear_state": state,
            "compute_total": _matmul_ms(hw, model, tokens, hw.tflops(model.dtype))}


def _matmul_ms(hw: Hardware, model: Model, tokens: float, tflops: float) -> float:
    """``tokens`` tokens through the active weights' matmuls at ``tflops`` (0: no ceiling)."""
    return 2 * model.active_params * tokens / (tflops * 1e12 * hw.count) * 1e3 if tflops else 0.0


def _allreduce_ms(hw: Hardware, model: Model, tokens: int, layers: int) -> float:
    if hw.count <= 1:
        return 0.0
    message = model.hidden * tokens * 2  # bf16 activations
    return 2 * layers * allreduce_us(hw.link, hw.count, message, hw.link_gbs) / 1e3


def _bf16(num_bytes: float, model: Model) -> float:
    return num_bytes * 2.0 / dtypes.bytes_per_param(model.dtype)


def _head(bf16_bytes: float, head_dtype: str | None) -> float:
    """A drafting head's bytes: bf16 unless the budget stores it in another dtype (an NVFP4
    EAGLE head on TensorRT Edge-LLM reads a quarter of its bf16 bytes)."""
    return bf16_bytes * dtypes.bytes_per_param(head_dtype) / 2.0 if head_dtype else bf16_bytes


def draft_forwards(spec: Speculation) -> int:
    """Forwards the drafter runs per round: one per chained step (MTP, EAGLE, a draft model),
    one block forward for DFlash, none for n-gram lookup."""
    if spec.method in ("none", "ngram"):
        return 0
    return 1 if spec.method == "dflash" else spec.steps


def _forward_ms(read_ms: float, layers: int, hw: Hardware) -> float:
    """One small forward: its reads, or its kernels' launch floor on a GPU, whichever is longer."""
    if hw.name == "cpu":
        return read_ms
    return max(read_ms, (OPS_PER_LAYER * layers + OPS_PER_FORWARD) * OP_FLOOR_MS)


def _draft_ms(
    hw: Hardware, model: Model, spec: Speculation, draft: Model | None, context: int, batch: int,
    names: Mapping[str, str], head_dtype: str | None = None,
) -> float:
    """The drafter's forwards per round, each at least its kernels' floor; plus the acceptance
    step's read of the verified positions' logits."""
    m = spec.method
    if m == "none":
        return 0.0
    accept = _ms(spec.verify_tokens * batch * model.vocab * LOGIT_BYTES, hw)
    if m == "ngram":
        return accept
    if m == "mtp":
        if model.mtp_bytes <= 0:
            raise ConfigError(
                f"{names['spec']}={spec.label}: model '{model.name}' has no MTP head; use eagle3, "
                "draft, ngram or none"
            )
        step = _forward_ms(_ms(_head(_bf16(model.mtp_bytes, model), head_dtype)
                               if head_dtype else model.mtp_bytes, hw), 1, hw)
        return accept + spec.steps * (step + _allreduce_ms(hw, model, batch, 1))
    if m in ("eagle", "eagle3"):
        fc = (3 if m == "eagle3" else 2) * model.hidden * model.hidden * 2
        vocab = EAGLE3_DRAFT_VOCAB if m == "eagle3" else model.vocab
        step = _head(_bf16(model.layer_bytes, model) + fc + vocab * model.hidden * 2, head_dtype)
        return accept + spec.steps * (_forward_ms(_ms(step, hw), 1, hw)
                                      + _allreduce_ms(hw, model, batch, 1))
    if m == "draft":
        if draft is None:
            raise ConfigError(f"{names['spec']}={spec.label} needs {names['draft_model']} "
                              "(catalog name, config.json or .gguf)")
        one = compute_roofline(hw, draft, Speculation("none", 0, 0), None,
                               Deployment(context, batch, 0.0))
        return accept + spec.steps * _forward_ms(one.round_ms, draft.n_layers, hw)
    # dflash: one block-drafter forward per round
    if draft is not None:
        tokens = spec.verify_tokens * batch
        one = compute_roofline(hw, draft, Speculation("none", 0, 0), None,
                               Deployment(context, tokens, 0.0))
        return accept + _forward_ms(one.round_ms, draft.n_layers, hw)
    step = _head(DFLASH_LAYERS * _bf16(model.layer_bytes, model)
                 + _bf16(model.lm_head_bytes, model), head_dtype)
    return (accept + _forward_ms(_ms(step, hw), DFLASH_LAYERS, hw)
            + _allreduce_ms(hw, model, spec.verify_tokens * batch, DFLASH_LAYERS))


def compute_roofline(
    hardware: Hardware,
    model: Model,
    spec: Speculation,
    draft_model: Model | None = None,
    deployment: Deployment = DEFAULT_DEPLOYMENT,
    head_dtype: str | None = None,
    names: Mapping[str, str] | None = None,
) -> Roofline:
    """Per-round breakdown for ``deployment.batch`` sequences each verifying
    ``spec.verify_tokens`` tokens.

    The model side is ``model``, ``spec``, ``draft_model`` and ``head_dtype``: the last stores an
    MTP, EAGLE or DFlash head in another dtype than bf16 (MTP: than the target's); a draft model
    has its own dtype instead, so with one it is ignored. ``deployment`` is the serving side.
    ``names`` says where each input came from, for errors (``spec``, ``draft_model``, ``batch``,
    ``context``, ``overhead_ms``, ``draft_step_ms``: a flag, or a budget's file:line: key);
    default: the key itself.
    """
    context, batch = deployment.context, deployment.batch
    overhead_ms, draft_step_ms = deployment.overhead_ms, deployment.draft_step_ms
    names = {**{k: k for k in ORIGIN_KEYS}, **(names or {})}
    if batch < 1:
        raise ConfigError(f"{names['batch']}={batch}: must be at least 1")
    if context < 0:
        raise ConfigError(f"{names['context']}={context}: must be >= 0")
    if overhead_ms < 0:
        raise ConfigError(f"{names['overhead_ms']}={overhead_ms}: must be >= 0")
    if draft_step_ms < 0:
        raise ConfigError(f"{names['draft_step_ms']}={draft_step_ms}: must be >= 0")
    if draft_model is not None:
        head_dtype = None
    elif head_dtype is not None:
        head_dtype = dtypes.canonical_dtype(head_dtype, names["draft_dtype"])
    tokens = spec.verify_tokens * batch
    layout = deployment.layout
    if layout is None and hardware.count > hardware.gpus_per_node:
        layout = Layout(tp=hardware.count)  # tensor parallelism across the nodes
    if layout is not None:
        return _at_layout(hardware, model, spec, draft_model, deployment, head_dtype, names,
                          layout.checked(hardware.count, hardware.gpus_per_node,
                                         model.n_experts, names["layout"]))
    v = _verify(hardware, model, tokens, context, batch)
    memory = v["weights"] + v["kv_cache"] + v["linear_state"]
    components = {
        "weights": v["weights"],
        "kv_cache": v["kv_cache"],
        "linear_state": v["linear_state"],
        "compute": max(0.0, v["compute_total"] - memory),
        "allreduce": _allreduce_ms(hardware, model, tokens, model.n_layers),
        "draft": _draft_ms(hardware, model, spec, draft_model, context, batch, names, head_dtype)
        + draft_forwards(spec) * draft_step_ms,
        "overhead": overhead_ms,
    }
    return Roofline(hardware, model, spec, components, _bound(v["compute_total"], memory, components),
                    context, batch, draft_model, draft_step_ms, deployment.overhead_source, head_dtype,
                    v["compute_total"], _matmul_ms(hardware, model, 1, hardware.prefill_tflops(
                        model.dtype)))


def _at_layout(hardware: Hardware, model: Model, spec: Speculation, draft_model: Model | None,
               deployment: Deployment, head_dtype: str | None, names: Mapping[str, str],
               layout: Layout) -> Roofline:
    """The round at ``layout`` (:mod:`~pytest_specbound.physics.layout_round`): the slowest
    GPU's parts; the drafter runs on the instance's TP group."""
    context, batch = deployment.context, deployment.batch
    tokens = spec.verify_tokens * batch
    r = layout_round(hardware, model, layout, tokens, context, batch,
                     hardware.tflops(model.dtype))
    group = replace(hardware, count=layout.tp)
    components = {**r.components_ms,
                  "draft": _draft_ms(group, model, spec, draft_model, context, batch, names,
                                     head_dtype) + draft_forwards(spec) * deployment.draft_step_ms,
                  "overhead": deployment.overhead_ms}
    memory = sum(r.components_ms[k] for k in ("weights", "kv_cache", "linear_state"))
    return Roofline(hardware, model, spec, components,
                    _bound(r.compute_total_ms, memory, components), context, batch, draft_model,
                    deployment.draft_step_ms, deployment.overhead_source, head_dtype,
                    r.compute_total_ms,
                    _matmul_ms(group, model, 1, hardware.prefill_tflops(model.dtype)), layout,
                    r.notes)


def _bound(compute_total: float, memory: float, components: Mapping[str, float]) -> str:
    """What the round's time mostly is: the target's memory read or compute, or, where one of
    them is larger, the allreduce, the all-to-all, the pipeline's hand-offs, the drafter or the
    scheduler constant (a tiny model)."""
    parts = {"memory": memory, "compute": compute_total, "allreduce": components["allreduce"],
             "all-to-all": components.get("all_to_all", 0.0),
             "pipeline hand-offs": components.get("pipeline", 0.0),
             "draft": components["draft"], "scheduler overhead": components["overhead"]}
    return max(parts, key=lambda k: parts[k])

