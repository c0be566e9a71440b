"""Model geometry from a GGUF file: its metadata as config.json fields, its exact tensor bytes.

The metadata is translated to Hugging Face field names and built by the same
:func:`geometry_from_config` as every other source; the tensor table then gives the exact bytes
(weights, routed experts, LM head, the MTP / nextn blocks llama.cpp appends after the decoder).
No weights are loaded.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import replace
from pathlib import Path
from typing import Any

from pytest_specbound._toml import TomlTable
from pytest_specbound.errors import ConfigError
from pytest_specbound.physics import dtypes
from pytest_specbound.physics.geometry import Model, geometry_from_config

# config.json field <- GGUF key (after "{arch}."), for the fields the geometry reads
CONFIG_FROM_GGUF = {
    "hidden_size": "embedding_length",
    "num_attention_heads": "attention.head_count",
    "num_key_value_heads": "attention.head_count_kv",
    "head_dim": "attention.key_length",
    "intermediate_size": "feed_forward_length",
    "num_experts": "expert_count",
    "num_experts_per_tok": "expert_used_count",
    "moe_intermediate_size": "expert_feed_forward_length",
    "shared_expert_intermediate_size": "expert_shared_feed_forward_length",
    "n_shared_experts": "expert_shared_count",
    "first_k_dense_replace": "leading_dense_block_count",
    "kv_lora_rank": "attention.kv_lora_rank",
    "q_lora_rank": "attention.q_lora_rank",
    "num_nextn_predict_layers": "nextn_predict_layers",
    "full_attention_interval": "full_attention_interval",
    "vocab_size": "vocab_size",
    # Gated DeltaNet (qwen3next): llama.cpp stores it as SSM fields
    "linear_num_key_heads": "ssm.group_count",
    "linear_num_value_heads": "ssm.time_step_rank",
    "linear_key_head_dim": "ssm.state_size",
    "linear_conv_kernel_dim": "ssm.conv_kernel",
}
TYPE_DTYPES = {"F16": "fp16", "BF16": "bf16", "F32": "fp32"}


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


def gguf_config(reader: Any, path: Path) -> tuple[str, TomlTable]:
    """(architecture, config.json-style fields) from a GGUF file's metadata."""
    arch = _field(reader, "general.architecture")
    if not isinstance(arch, str):
        raise ConfigError(f"{path}: missing field 'general.architecture'")
    for key in ("block_count", "embedding_length", "attention.head_count"):
        if _field(reader, f"{arch}.{key}") is None:
            raise ConfigError(f"{path}: missing field '{arch}.{key}'")
    cfg: TomlTable = {}
    for name, key in CONFIG_FROM_GGUF.items():
        value = _field(reader, f"{arch}.{key}")
        if isinstance(value, list):  # per-layer values (e.g. feed_forward_length): the largest
            value = max(value) if value else None
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            cfg[name] = int(value)
    inner = _field(reader, f"{arch}.ssm.inner_size")
    if "linear_num_value_heads" in cfg and isinstance(inner, int):
        cfg["linear_value_head_dim"] = inner // cfg["linear_num_value_heads"]
    nextn = cfg.get("num_nextn_predict_layers", 0)
    cfg["num_hidden_layers"] = int(_field(reader, f"{arch}.block_count")) - nextn  # MTP appended
    return arch, cfg


def load_gguf(path: Path, origin: str = "model") -> Model:
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
    arch, cfg = gguf_config(reader, path)
    n_layers = cfg["num_hidden_layers"]
    weights = experts = mtp = lm_head = 0.0
    block0_dense = 0.0
    types: Counter[str] = Counter()
    for t in reader.tensors:
        size = float(t.n_bytes)
        types[t.tensor_type.name] += 1
        parts = t.name.split(".")
        block = int(parts[1]) if parts[0] == "blk" and parts[1].isdigit() else None
        if block is not None and block >= n_layers:
            mtp += size  # the nextn / MTP blocks after the decoder
            continue
        weights += size
        if "_exps" in t.name:
            experts += size
        elif block == 0:
            block0_dense += size
        if t.name in ("output.weight", "token_embd.weight"):
            cfg["vocab_size"] = max(cfg.get("vocab_size", 0), int(max(t.shape)))
            if t.name == "output.weight" or not lm_head:
                lm_head = size
    if "output.weight" not in {t.name for t in reader.tensors}:
        cfg["tie_word_embeddings"] = True
    main = max(types, key=lambda k: types[k]) if types else "F32"
    dtype = main.lower() if main.lower() in dtypes.DTYPES else TYPE_DTYPES.get(main, "fp16")
    cfg.update(dtype=dtype, weight_bytes=weights)
    if mtp:
        cfg["mtp_bytes"] = mtp
    mix = ", ".join(f"{k}x{v}" for k, v in types.most_common())
    model = geometry_from_config(cfg, path.stem,
                                 f"{path} (GGUF {arch}, exact tensor bytes; types {mix})")
    exact: TomlTable = {"lm_head_bytes": lm_head, "exact_bytes": True}
    if model.is_moe and model.moe_layers:
        exact["expert_bytes"] = experts / (model.n_experts * model.moe_layers)
    elif block0_dense:
        exact["layer_bytes"] = block0_dense  # a dense decoder layer: what an EAGLE layer reads
    return replace(model, **exact)
