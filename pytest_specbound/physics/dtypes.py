"""Bytes per parameter for weight dtypes, scale overhead included."""

from __future__ import annotations

from pytest_specbound.errors import ConfigError, close_matches

# name -> (bytes per parameter, how it is derived)
DTYPES: dict[str, tuple[float, str]] = {
    "fp32": (4.0, "32-bit float"),
    "bf16": (2.0, "16-bit bfloat"),
    "fp16": (2.0, "16-bit float"),
    "fp8": (1.0, "8-bit float, per-tensor/per-channel scales (negligible)"),
    "int8": (1.0 + 2.0 / 128, "8-bit int + one fp16 scale per 128-weight group"),
    "int4": (0.5 + 4.0 / 128, "4-bit int + fp16 scale and zero per 128-weight group (AWQ/GPTQ)"),
    "int4-g32": (0.5 + 4.0 / 32, "4-bit int + bf16 scale and zero per 32-weight group (gpt-fast)"),
    "fp4": (0.5 + 1.0 / 16, "NVFP4: 4-bit float + one fp8 scale per 16 weights"),
    "mxfp4": (0.5 + 1.0 / 32, "MXFP4: 4-bit float + one e8m0 scale per 32 weights"),
    # GGUF block formats (ggml-common.h block sizes), for catalog models served by llama.cpp
    "q8_0": (34.0 / 32, "GGUF Q8_0: 32 int8 + one fp16 scale (8.5 bits)"),
    "q6_k": (210.0 / 256, "GGUF Q6_K: 6.5625 bits per weight"),
    "q5_k": (176.0 / 256, "GGUF Q5_K: 5.5 bits per weight"),
    "q4_k": (144.0 / 256, "GGUF Q4_K: 4.5 bits per weight"),
    "q4_0": (18.0 / 32, "GGUF Q4_0: 32 4-bit + one fp16 scale (4.5 bits)"),
}

# Weights a CPU server multiplies with integer SIMD kernels (llama.cpp: int8 dot products,
# repacked Q4_0 GEMMs, VNNI, AMX), which an fp32 matmul probe cannot bound.
INTEGER_KERNEL = frozenset({"int8", "int4", "int4-g32", "q8_0", "q6_k", "q5_k", "q4_k", "q4_0"})

ALIASES = {"float32": "fp32", "bfloat16": "bf16", "float16": "fp16", "half": "fp16",
           "float8": "fp8", "fp8_e4m3": "fp8", "float8_e4m3fn": "fp8", "q4_k_m": "q4_k",
           "q5_k_m": "q5_k", "nvfp4": "fp4", "w4a16": "int4", "w8a16": "int8"}


def canonical_dtype(name: str, origin: str = "dtype") -> str:
    """Normalise a dtype name, raising a one-line error listing the valid names."""
    key = name.strip().lower()
    key = ALIASES.get(key, key)
    if key not in DTYPES:
        raise ConfigError(
            f"{origin}={name}: unknown dtype; valid: {', '.join(DTYPES)}"
            f" (did you mean {', '.join(close_matches(key, list(DTYPES), 3))}?)"
        )
    return key


def bytes_per_param(name: str, origin: str = "dtype") -> float:
    """Bytes per weight for ``name``, scale overhead included."""
    return DTYPES[canonical_dtype(name, origin)][0]
