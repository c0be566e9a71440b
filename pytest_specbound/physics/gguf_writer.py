"""Generate tiny llama-architecture GGUF models with random weights (no model hub needed).

The vocabulary is SentencePiece-style byte fallback: <unk>, <s>, </s> and the 256 byte tokens, so
any text tokenizes and target and draft models share one vocabulary.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

VOCAB = ["<unk>", "<s>", "</s>"] + [f"<0x{b:02X}>" for b in range(256)]


def write_llama_gguf(
    path: Path, n_layers: int = 2, hidden: int = 128, ffn: int = 256, heads: int = 4,
    kv_heads: int | None = None, seed: int = 0, context: int = 4096, nextn: int = 0,
    extra_fields: Mapping[str, int] | None = None,
) -> Path:
    """Write a random-weight llama GGUF (f16 matrices, f32 norms) and return its path.

    ``nextn`` appends that many MTP blocks after the decoder (llama.cpp's layout: counted in
    ``block_count``, named by ``nextn_predict_layers``); ``extra_fields`` adds ``llama.KEY``
    integer metadata (for example the SSM fields of a hybrid model).
    """
    import gguf
    import numpy as np

    kv_heads = kv_heads or heads
    head_dim = hidden // heads
    rng = np.random.default_rng(seed)
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_name(path.stem)
    writer.add_context_length(context)
    writer.add_embedding_length(hidden)
    writer.add_block_count(n_layers + nextn)
    if nextn:
        writer.add_uint32("llama.nextn_predict_layers", nextn)
    for key, value in (extra_fields or {}).items():
        writer.add_uint32(f"llama.{key}", value)
    writer.add_feed_forward_length(ffn)
    writer.add_head_count(heads)
    writer.add_head_count_kv(kv_heads)
    writer.add_rope_dimension_count(head_dim)
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_file_type(gguf.LlamaFileType.MOSTLY_F16)
    writer.add_tokenizer_model("llama")
    writer.add_token_list(VOCAB)
    writer.add_token_scores([0.0] * len(VOCAB))
    types = [gguf.TokenType.UNKNOWN, gguf.TokenType.CONTROL, gguf.TokenType.CONTROL]
    writer.add_token_types(types + [gguf.TokenType.BYTE] * 256)
    writer.add_unk_token_id(0)
    writer.add_bos_token_id(1)
    writer.add_eos_token_id(2)
    writer.add_add_bos_token(True)

    def mat(rows: int, cols: int) -> np.ndarray:
        return (rng.standard_normal((rows, cols), dtype=np.float32) * 0.05).astype(np.float16)

    def norm() -> np.ndarray:
        return np.ones(hidden, dtype=np.float32)

    vocab = len(VOCAB)
    writer.add_tensor("token_embd.weight", mat(vocab, hidden))
    writer.add_tensor("output_norm.weight", norm())
    writer.add_tensor("output.weight", mat(vocab, hidden))
    for i in range(n_layers + nextn):
        p = f"blk.{i}."
        writer.add_tensor(p + "attn_norm.weight", norm())
        writer.add_tensor(p + "attn_q.weight", mat(hidden, hidden))
        writer.add_tensor(p + "attn_k.weight", mat(kv_heads * head_dim, hidden))
        writer.add_tensor(p + "attn_v.weight", mat(kv_heads * head_dim, hidden))
        writer.add_tensor(p + "attn_output.weight", mat(hidden, hidden))
        writer.add_tensor(p + "ffn_norm.weight", norm())
        writer.add_tensor(p + "ffn_gate.weight", mat(ffn, hidden))
        writer.add_tensor(p + "ffn_up.weight", mat(ffn, hidden))
        writer.add_tensor(p + "ffn_down.weight", mat(hidden, ffn))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path
