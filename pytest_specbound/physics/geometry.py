"""Model geometry: the one builder of :class:`Model`, from Hugging Face ``config.json`` fields.

Every source goes through :func:`geometry_from_config`: the catalog (``data/models.toml``, same
field names), ``config.json`` and safetensors folders, and GGUF files (their metadata translated
to the same names by :mod:`models_gguf`). A source that knows exact bytes states them
(``weight_bytes``, ``mtp_bytes``, and the exact fields passed to :func:`with_exact_bytes`).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from pytest_specbound._toml import TomlTable
from pytest_specbound.errors import ConfigError
from pytest_specbound.physics import dtypes

FP32_STATE_BYTES = 4  # GDN / Mamba recurrent state is kept in fp32 by SGLang and vLLM
KV_BYTES = 2  # bf16 KV cache


@dataclass(frozen=True)
class Model:
    """What one forward pass of the target reads, plus what the drafters need to know."""

    name: str
    source: str
    dtype: str
    n_layers: int
    hidden: int
    vocab: int
    weight_bytes: float  # all target weights, MTP head excluded, at ``dtype``
    active_params: float  # parameters multiplied per token (compute term)
    kv_bytes_per_token: float  # KV cache bytes per context token, all layers
    state_bytes: float  # linear-attention recurrent state, all layers (per sequence)
    layer_bytes: float  # one dense decoder layer (an EAGLE draft layer has this shape)
    lm_head_bytes: float
    mtp_bytes: float = 0.0  # MTP / nextn head(s), 0 when the model has none
    n_experts: int = 0
    experts_per_token: int = 0
    moe_layers: int = 0
    expert_bytes: float = 0.0  # one routed expert of one layer
    exact_bytes: bool = False  # bytes read from a file, not counted from the geometry
    attention_bytes: float = 0.0  # every layer's attention (or linear-attention) weights
    latent_kv: bool = False  # MLA: one compressed KV per token, which every TP rank keeps whole

    @property
    def is_moe(self) -> bool:
        return self.n_experts > 0

    @property
    def routed_bytes(self) -> float:
        return self.expert_bytes * self.n_experts * self.moe_layers

    def with_dtype(self, dtype: str) -> Model:
        """The same model stored in another dtype (a what-if: FP8 halves the weight read)."""
        new = dtypes.canonical_dtype(dtype)
        ratio = dtypes.bytes_per_param(new) / dtypes.bytes_per_param(self.dtype)
        return replace(
            self,
            dtype=new,
            weight_bytes=self.weight_bytes * ratio,
            layer_bytes=self.layer_bytes * ratio,
            lm_head_bytes=self.lm_head_bytes * ratio,
            mtp_bytes=self.mtp_bytes * ratio,
            expert_bytes=self.expert_bytes * ratio,
            attention_bytes=self.attention_bytes * ratio,
        )

    def with_expert_dtype(self, dtype: str, current: str | None = None) -> Model:
        """The routed experts stored in ``dtype`` (from ``current``, default the model's dtype),
        the rest unchanged: NVFP4 experts beside bf16 attention, as TensorRT-LLM serves
        DeepSeek-R1."""
        ratio = dtypes.bytes_per_param(dtype) / dtypes.bytes_per_param(current or self.dtype)
        routed = self.routed_bytes
        return replace(self, expert_bytes=self.expert_bytes * ratio,
                       weight_bytes=self.weight_bytes - routed + routed * ratio)

    def describe(self) -> dict[str, object]:
        """JSON-ready summary."""
        return {
            "name": self.name,
            "source": self.source,
            "dtype": self.dtype,
            "weight_gb": round(self.weight_bytes / 1e9, 3),
            "mtp_gb": round(self.mtp_bytes / 1e9, 3),
            "layers": self.n_layers,
            "hidden": self.hidden,
            "experts": [self.n_experts, self.experts_per_token] if self.is_moe else None,
            "kv_bytes_per_token": self.kv_bytes_per_token,
            "state_mb": round(self.state_bytes / 1e6, 3),
        }


class _Fields:
    """Reads config fields, naming the file and the missing key in errors."""

    def __init__(self, cfg: TomlTable, origin: str) -> None:
        text = cfg.get("text_config")
        self.cfg = {**cfg, **text} if isinstance(text, dict) else cfg
        self.origin = origin

    def req(self, *names: str) -> int:
        for n in names:
            v = self.cfg.get(n)
            if isinstance(v, (int, float)) and not isinstance(v, bool):
                return int(v)
        raise ConfigError(f"{self.origin}: missing field '{names[0]}' (a number is required)")

    def opt(self, *names: str, default: int = 0) -> int:
        for n in names:
            v = self.cfg.get(n)
            if isinstance(v, (int, float)) and not isinstance(v, bool):
                return int(v)
        return default


def _attention_params(f: _Fields, h: int) -> tuple[int, int]:
    """(params of one full-attention block, KV-cache elements per token for one layer)."""
    heads = f.req("num_attention_heads")
    if f.opt("kv_lora_rank"):  # MLA (DeepSeek V2/V3): cache the compressed latent + rope key
        rank, rope = f.req("kv_lora_rank"), f.req("qk_rope_head_dim")
        nope, v = f.req("qk_nope_head_dim"), f.req("v_head_dim")
        q_rank = f.opt("q_lora_rank")
        q = h * q_rank + q_rank * heads * (nope + rope) if q_rank else h * heads * (nope + rope)
        params = q + h * (rank + rope) + rank * heads * (nope + v) + heads * v * h
        return params, rank + rope
    kv_heads = f.opt("num_key_value_heads", default=heads)
    head_dim = f.opt("head_dim", default=h // heads)
    params = 2 * h * heads * head_dim + 2 * h * kv_heads * head_dim
    return params, 2 * kv_heads * head_dim


def _linear_attention(f: _Fields, h: int) -> tuple[int, int]:
    """(params of one Gated DeltaNet block, recurrent-state bytes of one layer)."""
    nv, nk = f.req("linear_num_value_heads"), f.req("linear_num_key_heads")
    dk, dv = f.req("linear_key_head_dim"), f.req("linear_value_head_dim")
    conv = f.opt("linear_conv_kernel_dim", default=4)
    params = h * (2 * nk * dk + 2 * nv * dv) + h * 2 * nv + nv * dv * h
    state = nv * dk * dv * FP32_STATE_BYTES + (conv - 1) * (2 * nk * dk + nv * dv) * KV_BYTES
    return params, state


def _full_attention_layers(f: _Fields, n_layers: int) -> list[bool]:
    types = f.cfg.get("layer_types")
    if isinstance(types, list) and len(types) == n_layers:
        return [t != "linear_attention" for t in types]
    interval = f.opt("full_attention_interval")
    if interval and "linear_num_value_heads" in f.cfg:
        return [(i + 1) % interval == 0 for i in range(n_layers)]
    return [True] * n_layers


def _mlp_shape(f: _Fields, n_layers: int, source: str) -> tuple[int, int, int, int, int, int]:
    """(experts, experts per token, expert width, dense width, shared-expert width, MoE
    layers); a dense model has no experts and no MoE layers."""
    dense_inter = f.req("intermediate_size", "moe_intermediate_size")
    n_experts = f.opt("num_experts", "n_routed_experts", "num_local_experts")
    top_k = f.opt("num_experts_per_tok", "moe_topk") if n_experts else 0
    if n_experts and not top_k:
        raise ConfigError(f"{source}: missing field 'num_experts_per_tok' (a MoE model needs it)")
    moe_inter = f.opt("moe_intermediate_size", default=dense_inter)
    dense_inter = f.opt("intermediate_size_mlp", default=dense_inter)  # Llama 4's dense layers
    first_dense = f.opt("first_k_dense_replace")
    moe_step = max(1, f.opt("interleave_moe_layer_step", default=1))  # Llama 4: every Nth layer
    shared_inter = f.opt("shared_expert_intermediate_size") or (
        f.opt("n_shared_experts") * moe_inter
    )
    moe_layers = (sum(1 for i in range(first_dense, n_layers) if (i + 1) % moe_step == 0)
                  if n_experts else 0)
    return n_experts, top_k, moe_inter, dense_inter, shared_inter, moe_layers


def geometry_from_config(
    cfg: TomlTable, name: str, source: str, dtype: str | None = None
) -> Model:
    """Build a :class:`Model` from Hugging Face config fields (catalog entries use the same names)."""
    f = _Fields(cfg, source)
    h, n_layers = f.req("hidden_size"), f.req("num_hidden_layers")
    vocab = f.req("vocab_size")
    n_experts, top_k, moe_inter, dense_inter, shared_inter, moe_layers = _mlp_shape(f, n_layers,
                                                                                      source)
    attn_params, kv_elems = _attention_params(f, h)
    full = _full_attention_layers(f, n_layers)
    lin_params, lin_state = _linear_attention(f, h) if not all(full) else (0, 0)
    dense_mlp = 3 * h * dense_inter
    expert = 3 * h * moe_inter

    mixer = sum(attn_params if is_full else lin_params for is_full in full)
    mlp = (n_layers - moe_layers) * dense_mlp
    moe_fixed = moe_layers * (3 * h * shared_inter + h * n_experts)  # shared experts + router
    routed = moe_layers * n_experts * expert
    embed = vocab * h
    tied = bool(f.cfg.get("tie_word_embeddings", False))
    total = mixer + mlp + moe_fixed + routed + embed * (1 if tied else 2)
    active = mixer + mlp + moe_fixed + moe_layers * top_k * expert + embed  # LM head multiplies
    mtp_layers = f.opt("num_nextn_predict_layers", "mtp_num_hidden_layers")
    layer = attn_params + (expert * (top_k or 1) if n_experts else dense_mlp)
    mtp_params = mtp_layers * (layer + 2 * h * h)

    d = dtypes.canonical_dtype(
        str(cfg.get("dtype") or cfg.get("torch_dtype") or "bf16"), f"{source}: dtype"
    )
    bpp = dtypes.bytes_per_param(d)
    expert_dtype = cfg.get("expert_dtype")  # routed experts stored apart (gpt-oss: MXFP4)
    ebpp = dtypes.bytes_per_param(str(expert_dtype), f"{source}: expert_dtype") \
        if expert_dtype else bpp
    counted = (total - routed) * bpp + routed * ebpp
    weight_bytes = float(cfg.get("weight_bytes") or counted)
    scale = weight_bytes / counted  # 1.0 unless the catalog states the bytes
    model = Model(
        name=name,
        source=source,
        dtype=d,
        n_layers=n_layers,
        hidden=h,
        vocab=vocab,
        weight_bytes=weight_bytes,
        active_params=active * scale,
        kv_bytes_per_token=sum(full) * kv_elems * KV_BYTES,
        state_bytes=float((n_layers - sum(full)) * lin_state),
        layer_bytes=(attn_params + dense_mlp) * bpp,
        lm_head_bytes=embed * bpp,
        mtp_bytes=float(cfg.get("mtp_bytes") or mtp_params * bpp),
        n_experts=n_experts,
        experts_per_token=top_k,
        moe_layers=moe_layers,
        expert_bytes=expert * ebpp * scale,
        attention_bytes=mixer * bpp * scale,
        latent_kv=bool(f.opt("kv_lora_rank")),
    )
    return model.with_dtype(dtype) if dtype else model
