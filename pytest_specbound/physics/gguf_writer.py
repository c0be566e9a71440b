"""Generate tiny llama-architecture GGUF models with random weights (no model hub needed).

The vocabulary is SentencePiece-style byte fallback: <unk>, <s>, </s> and the 256 byte tokens, so
any text tokenizes and target and draft models share one vocabulary.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

VOCAB = ["<unk>", "<s>", "</s>"] + [f"<0x{b:02X}>" for b in range(256)]


@dataclass(frozen=True)
class LlamaShape:
    """The architecture of a generated model: its decoder and the metadata that describes it.

    ``kv_heads`` defaults to ``heads``. ``nextn`` appends that many MTP blocks after the decoder
    (llama.cpp's layout: counted in ``block_count``, named by ``nextn_predict_layers``);
    ``extra_fields`` adds ``llama.KEY`` integer metadata (for example the SSM fields of a hybrid
    model).
    """

    n_layers: int = 2
    hidden: int = 128
    ffn: int = 256
    heads: int = 4
    kv_heads: int | None = None
    context: int = 4096
    nextn: int = 0
    extra_fields: Mapping[str, int] | None = None


DEFAULT_SHAPE = LlamaShape()


def write_llama_gguf(path: Path, shape: LlamaShape = DEFAULT_SHAPE, seed: int = 0,
                     quant: str | None = None) -> Path:
    """Write a random-weight llama GGUF of ``shape`` (f16 matrices, f32 norms) and return its
    path; ``seed`` draws the weights.

    ``quant`` ("q8_0" or "q4_0") stores the matrices with gguf's own quantizers instead, as
    llama.cpp's quantize tool would: those run llama.cpp's tuned integer kernels on a CPU.
    """
    import gguf
    import numpy as np

    n_layers, hidden, ffn, heads = shape.n_layers, shape.hidden, shape.ffn, shape.heads
    context, nextn, extra_fields = shape.context, shape.nextn, shape.extra_fields
    kv_heads = shape.kv_heads or heads
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
    writer.add_rope_dimension_count(hidden // heads)
    writer.add_layer_norm_rms_eps(1e-5)
    qtype, plain, file_type = _storage(gguf, np, quant)
    writer.add_file_type(file_type)
    _add_tokenizer(writer, gguf)
    rng = np.random.default_rng(seed)

    def mat(name: str, rows: int, cols: int) -> None:
        weights = rng.standard_normal((rows, cols), dtype=np.float32) * 0.05
        if qtype is None:
            writer.add_tensor(name, weights.astype(plain))
        else:
            writer.add_tensor(name, gguf.quants.quantize(weights, qtype), raw_dtype=qtype)

    _add_tensors(writer, mat, np.ones(hidden, dtype=np.float32), n_layers + nextn, hidden, ffn,
                 kv_heads * (hidden // heads))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def _storage(gguf: Any, np: Any, quant: str | None) -> tuple[Any, Any, Any]:
    """(quantization type or None, plain numpy dtype, file type) for ``quant``."""
    qtypes = {"q8_0": (gguf.GGMLQuantizationType.Q8_0, gguf.LlamaFileType.MOSTLY_Q8_0),
              "q4_0": (gguf.GGMLQuantizationType.Q4_0, gguf.LlamaFileType.MOSTLY_Q4_0)}
    if quant is not None and quant not in (*qtypes, "f32"):
        raise ValueError(f"quant={quant!r}: valid: {', '.join(qtypes)}, f32")
    plain = np.float32 if quant == "f32" else np.float16
    plain_type = gguf.LlamaFileType.ALL_F32 if quant == "f32" else gguf.LlamaFileType.MOSTLY_F16
    qtype, file_type = qtypes.get(quant or "", (None, plain_type))
    return qtype, plain, file_type


def _add_tokenizer(writer: Any, gguf: Any) -> None:
    """A byte-level llama vocabulary: unknown, BOS, EOS, then the 256 bytes."""
    writer.add_tokenizer_model("llama")
    writer.add_token_list(VOCAB)
    writer.add_token_scores([0.0] * len(VOCAB))
    types = [gguf.TokenType.UNKNOWN, gguf.TokenType.CONTROL, gguf.TokenType.CONTROL]
    writer.add_token_types(types + [gguf.TokenType.BYTE] * 256)
    writer.add_unk_token_id(0)
    writer.add_bos_token_id(1)
    writer.add_eos_token_id(2)
    writer.add_add_bos_token(True)


def _add_tensors(writer: Any, mat: Any, norm: Any, blocks: int, hidden: int, ffn: int,
                 kv_width: int) -> None:
    """Embedding, output and ``blocks`` decoder blocks (attention and a gated FFN)."""
    mat("token_embd.weight", len(VOCAB), hidden)
    writer.add_tensor("output_norm.weight", norm)
    mat("output.weight", len(VOCAB), hidden)
    for i in range(blocks):
        p = f"blk.{i}."
        writer.add_tensor(p + "attn_norm.weight", norm)
        mat(p + "attn_q.weight", hidden, hidden)
        mat(p + "attn_k.weight", kv_width, hidden)
        mat(p + "attn_v.weight", kv_width, hidden)
        mat(p + "attn_output.weight", hidden, hidden)
        writer.add_tensor(p + "ffn_norm.weight", norm)
        mat(p + "ffn_gate.weight", ffn, hidden)
        mat(p + "ffn_up.weight", ffn, hidden)
        mat(p + "ffn_down.weight", hidden, ffn)
