"""Where a model comes from: the catalog, a config.json / safetensors folder, or a GGUF file.

Each source ends in the one builder, :func:`geometry.geometry_from_config`.
"""

from __future__ import annotations

import json
from dataclasses import replace
from functools import lru_cache
from importlib import resources
from pathlib import Path

from pytest_specbound._toml import TomlTable, loads_toml, read_text
from pytest_specbound.errors import ConfigError, close_matches
from pytest_specbound.physics import dtypes
from pytest_specbound.physics.geometry import Model, geometry_from_config

__all__ = ["Model", "catalog", "catalog_rows", "geometry_from_config", "load_model"]

@lru_cache(maxsize=1)
def catalog() -> dict[str, TomlTable]:
    """The shipped model catalog, keyed by canonical name."""
    text = resources.files("pytest_specbound").joinpath("data/models.toml").read_text("utf-8")
    return loads_toml(text, "pytest_specbound/data/models.toml")


def catalog_rows() -> list[TomlTable]:
    """One row per catalog model, for ``specbound models``: what one forward pass reads."""
    rows = []
    for name, entry in catalog().items():
        m = load_model(name)
        rows.append({**m.describe(), "aliases": list(entry.get("aliases", [])),
                     "active_b": round(m.active_params / 1e9, 2),
                     "expert_dtype": entry.get("expert_dtype")})
    return rows


def _catalog_lookup(name: str) -> tuple[str, TomlTable] | None:
    key = name.strip().lower()
    for canonical, entry in catalog().items():
        if key == canonical or key in entry.get("aliases", []):
            return canonical, entry
    return None


def load_model(spec: str, dtype: str | None = None, origin: str = "model") -> Model:
    """Resolve a catalog name, a config.json / safetensors index / model folder, or a GGUF file."""
    found = _catalog_lookup(spec)
    if found:
        canonical, entry = found
        return geometry_from_config(
            entry, canonical, f"catalog {canonical}: {entry['source']}", dtype
        )
    path = Path(spec)
    if path.suffix == ".gguf" or (path.is_file() and path.read_bytes()[:4] == b"GGUF"):
        from pytest_specbound.physics.models_gguf import load_gguf

        model = load_gguf(path, origin)
        return model.with_dtype(dtype) if dtype else model
    if path.is_dir():
        return _load_hf_folder(path, dtype, origin)
    if path.suffix == ".json":
        if path.name.endswith("safetensors.index.json"):
            return _load_hf_folder(path.parent, dtype, origin, index=path)
        return geometry_from_config(_read_json(path, origin), path.parent.name or path.stem,
                                    str(path), dtype)
    raise ConfigError(
        f"{origin}={spec}: unknown model; catalog: {', '.join(sorted(catalog()))} "
        f"(did you mean {', '.join(close_matches(spec, list(catalog()), 3))}?), "
        "or a path to config.json, model.safetensors.index.json, a model folder or a .gguf file"
    )


def _read_json(path: Path, origin: str) -> TomlTable:
    try:
        data = json.loads(read_text(path, f"{origin}={path}"))
    except json.JSONDecodeError as exc:
        raise ConfigError(f"{path}:{exc.lineno}: invalid JSON: {exc.msg}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: expected a JSON object")
    return data


def _load_hf_folder(
    folder: Path, dtype: str | None, origin: str, index: Path | None = None
) -> Model:
    config = folder / "config.json"
    if not config.is_file():
        raise ConfigError(f"{origin}={folder}: no config.json in the folder")
    model = geometry_from_config(_read_json(config, origin), folder.name, str(config), dtype)
    index = index or folder / "model.safetensors.index.json"
    if not index.is_file():
        return model
    data = _read_json(index, origin)
    total = (data.get("metadata") or {}).get("total_size")
    if not isinstance(total, (int, float)):
        raise ConfigError(f"{index}: missing field 'metadata.total_size'")
    names = list((data.get("weight_map") or {}).keys())
    has_mtp = any(".mtp." in n or n.startswith("mtp.") for n in names)
    mtp = model.mtp_bytes if has_mtp else 0.0
    stored = dtypes.canonical_dtype(model.dtype)
    exact = replace(model, weight_bytes=float(total) - mtp, exact_bytes=True,
                    source=f"{index} (exact bytes) + {config}")
    return exact.with_dtype(dtype) if dtype and dtype != stored else exact
