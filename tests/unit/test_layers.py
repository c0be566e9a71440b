"""The layer contract: each stage imports only earlier ones; pytest only in the plugin."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

PKG = Path(__file__).resolve().parents[2] / "pytest_specbound"
STAGES = ("physics", "serving", "measure", "gate", "report")  # the data flow, in order
SHELLS = ("plugin", "cli")  # on top of everything
BASE = ("errors", "atomic", "_toml", "values", "__init__")  # leaves any stage may use
HEAVY = ("requests", "urllib3", "numpy", "gguf", "prometheus_client", "filelock", "matplotlib",
         "pynvml", "pytest_specbound.serving", "pytest_specbound.measure",
         "pytest_specbound.physics.roofline")


def imports(path: Path, package_parts: list[str]) -> list[tuple[int, str]]:
    """(line, absolute module) for every import in ``path``, function bodies included."""
    out = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            out += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package_parts[:len(package_parts) - node.level + 1]
                mod = ".".join([*base, *([node.module] if node.module else [])])
            else:
                mod = node.module or ""
            out.append((node.lineno, mod))
            out += [(node.lineno, f"{mod}.{a.name}") for a in node.names if mod == "pytest_specbound"]
    return out


def stage_of(module: str) -> str | None:
    parts = module.split(".")
    if parts[0] != "pytest_specbound" or len(parts) < 2:
        return None
    return parts[1]


def violations(pkg: Path) -> list[str]:
    found = []
    for path in sorted(pkg.rglob("*.py")):
        rel = path.relative_to(pkg.parent).with_suffix("")
        parts = list(rel.parts)
        package_parts = parts if path.name == "__init__.py" else parts[:-1]
        own = parts[1] if len(parts) > 1 else "__init__"
        if own == "__init__" and len(parts) == 2:
            continue  # the public API imports lazily from every stage
        for line, mod in imports(path, package_parts):
            where = f"{path.relative_to(pkg.parent)}:{line}"
            if mod.split(".")[0] == "pytest" and own != "plugin":
                found.append(f"{where}: imports pytest below the plugin")
            target = stage_of(mod)
            if target is None or target in BASE or target == own or target == "data":
                continue
            if own in BASE:
                found.append(f"{where}: base module imports {mod}")
            elif own in SHELLS and target in SHELLS:
                found.append(f"{where}: the shell {own} leans on the shell {mod}")
            elif own in STAGES and (target in SHELLS or (target in STAGES and
                                                          STAGES.index(target) > STAGES.index(own))):
                found.append(f"{where}: {own} imports the later {mod}")
    return found


def test_no_stage_imports_a_later_one_and_pytest_stays_in_the_plugin():
    assert violations(PKG) == []


def test_the_folders_are_the_stages():
    folders = sorted(p.name for p in PKG.iterdir() if p.is_dir() and (p / "__init__.py").is_file())
    assert folders == sorted([*STAGES, "plugin", "cli"])  # the stages, and the two shells


def test_the_check_catches_a_deliberate_violation(tmp_path):
    pkg = tmp_path / "pytest_specbound"
    for stage in ("physics", "gate"):
        (pkg / stage).mkdir(parents=True)
        (pkg / stage / "__init__.py").write_text("")
    (pkg / "__init__.py").write_text("")
    (pkg / "physics" / "roofline.py").write_text(
        "def f():\n    from ..gate.verdict import judge\n    import pytest\n")
    found = violations(pkg)
    assert found == ["pytest_specbound/physics/roofline.py:2: physics imports the later "
                     "pytest_specbound.gate.verdict",
                     "pytest_specbound/physics/roofline.py:3: imports pytest below the plugin"]


def test_loading_the_plugin_imports_nothing_heavy():
    code = ("import sys, pytest_specbound.plugin; "
            "print('\\n'.join(sorted(m for m in sys.modules)))")
    loaded = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            check=True).stdout.split()
    assert [m for m in loaded if m.split(".")[0] in HEAVY or m.startswith(HEAVY)] == []


def test_every_public_name_resolves():
    import pytest_specbound

    for name in pytest_specbound.__all__:
        assert getattr(pytest_specbound, name) is not None, name
