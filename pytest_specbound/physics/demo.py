"""The CPU demo: generated GGUF models for ``{demo_gguf}`` / ``{demo_draft_gguf}`` placeholders."""

from __future__ import annotations

from pathlib import Path

from pytest_specbound.atomic import replacing
from pytest_specbound.errors import ConfigError
from pytest_specbound.physics.gguf_writer import LlamaShape, write_llama_gguf

DEMO_DIR = Path(".specbound") / "demo"
# The target (0.2 GB) is larger than most CPUs' last-level cache (not a 480 MiB Xeon's); on one
# thread its 4-token verify costs about as much as its read, so the roofline's compute side (the
# server's own kernels, physics/kernel_probe.py) and memory side both matter.
TARGET = LlamaShape(n_layers=8, hidden=1024, ffn=2816, heads=8)
TARGET_SEED = 2
DRAFT = LlamaShape(n_layers=1, hidden=128, ffn=256, heads=2)
DRAFT_SEED = 1


def demo_models(root: Path | None = None) -> dict[str, str]:
    """Write the demo target and draft models once (cached) and return placeholder values."""
    base = (root or Path.cwd()) / DEMO_DIR
    out = {}
    for key, name, shape, seed in (("demo_gguf", "target.gguf", TARGET, TARGET_SEED),
                                   ("demo_draft_gguf", "draft.gguf", DRAFT, DRAFT_SEED)):
        path = base / name
        if not path.is_file():  # parallel workers may each write one; the last rename wins
            try:
                with replacing(path) as tmp:
                    write_llama_gguf(tmp, shape, seed)
            except ImportError:
                raise ConfigError(
                    "{demo_gguf}: generating the demo model needs gguf and numpy: "
                    "pip install 'pytest-specbound[llamacpp]'"
                ) from None
        out[key] = str(path)
    return out
