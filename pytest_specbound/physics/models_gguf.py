"""Model geometry from a GGUF file: exact tensor bytes and types, through the ``gguf`` package."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

from pytest_specbound.errors import ConfigError
from pytest_specbound.physics.models import KV_BYTES, Model


def _field(reader: Any, key: str) -> Any:
    field = reader.fields.get(key)
    if field is None:
        return None
    if hasattr(field, "contents"):  # gguf >= 0.11
        return field.contents()
    value = field.parts[field.data[0]]  # pragma: no cover - older gguf
    if field.types and field.types[0].name == "STRING":
        return bytes(value).decode("utf-8", "replace")
    return value.tolist()[0]


def load_gguf(path: Path, origin: str = "--model") -> Model:
    """Read the metadata and tensor table of a GGUF file (no weights are loaded)."""
    try:
        import gguf
    except ImportError:
        raise ConfigError(
            f"{origin}={path}: reading GGUF needs the 'gguf' package: "
            "pip install 'pytest-specbound[llamacpp]'"
        ) from None
    if not path.is_file():
        raise ConfigError(f"{origin}={path}: no such file")
    try:
        reader = gguf.GGUFReader(str(path), "r")
    except (ValueError, OSError) as exc:
        raise ConfigError(f"{origin}={path}: not a readable GGUF file: {exc}") from None
    arch = _field(reader, "general.architecture")
    if not isinstance(arch, str):
        raise ConfigError(f"{path}: missing field 'general.architecture'")

    def num(key: str, default: int | None = None) -> int:
        v = _field(reader, f"{arch}.{key}")
        if v is None:
            if default is None:
                raise ConfigError(f"{path}: missing field '{arch}.{key}'")
            return default
        return int(v)

    n_layers, hidden = num("block_count"), num("embedding_length")
    heads = num("attention.head_count")
    kv_heads = num("attention.head_count_kv", heads)
    head_dim = num("attention.key_length", hidden // heads)
    n_experts, top_k = num("expert_count", 0), num("expert_used_count", 0)

    total = 0.0
    expert_total = 0.0
    lm_head = 0.0
    block0 = 0.0
    types: Counter[str] = Counter()
    vocab = 0
    for t in reader.tensors:
        size = float(t.n_bytes)
        types[t.tensor_type.name] += 1
        if "_exps" in t.name:
            expert_total += size
        else:
            total += size
        if t.name in ("output.weight", "token_embd.weight"):
            vocab = max(vocab, int(max(t.shape)))
            if t.name == "output.weight" or not lm_head:
                lm_head = size
        if t.name.startswith("blk.0."):
            block0 += size
    moe_layers = n_layers if n_experts else 0
    expert_bytes = expert_total / (n_experts * moe_layers) if n_experts else 0.0
    main = max(types, key=lambda k: types[k]) if types else "F32"
    mix = ", ".join(f"{k}x{v}" for k, v in types.most_common())
    from pytest_specbound.physics import dtypes

    dtype = main.lower() if main.lower() in dtypes.DTYPES else {"F16": "fp16", "BF16": "bf16",
                                                                "F32": "fp32"}.get(main, "fp16")
    return Model(
        name=path.stem,
        source=f"{path} (GGUF {arch}, exact tensor bytes; types {mix})",
        dtype=dtype,
        n_layers=n_layers,
        hidden=hidden,
        vocab=vocab,
        weight_bytes=total + expert_total,
        active_params=(total + expert_total * (top_k / n_experts if n_experts else 1))
        / dtypes.bytes_per_param(dtype),
        kv_bytes_per_token=float(n_layers * 2 * kv_heads * head_dim * KV_BYTES),
        state_bytes=0.0,
        layer_bytes=block0,
        lm_head_bytes=lm_head,
        n_experts=n_experts,
        experts_per_token=top_k,
        moe_layers=moe_layers,
        expert_bytes=expert_bytes,
        exact_bytes=True,
    )
