"""The layer contract: each stage imports only earlier ones, each gate package only the gate
packages before it, as its ``__init__`` says; pytest only in the plugin; no folder over 20
modules."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

PKG = Path(__file__).resolve().parents[2] / "pytest_specbound"
STAGES = ("physics", "serving", "measure", "gate", "advisers", "report")  # the data flow, in order
GATE = ("verdicts", "schema", "references", "judging", "pipeline")  # gate's packages, in order
MAX_MODULES = 20
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


def gate_package_of(module: str) -> str | None:
    """The gate package of a module (``pytest_specbound.gate.schema.budget``: ``schema``)."""
    parts = module.split(".")
    return parts[2] if parts[:2] == ["pytest_specbound", "gate"] and len(parts) > 2 else None


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
            if own == "gate" == target:
                mine, theirs = gate_package_of(".".join(parts)), gate_package_of(mod)
                if mine in GATE and theirs in GATE and GATE.index(theirs) > GATE.index(mine):
                    found.append(f"{where}: gate.{mine} imports the later {mod}")
                continue
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
    gate = sorted(p.name for p in (PKG / "gate").iterdir() if (p / "__init__.py").is_file())
    assert gate == sorted(GATE) and not [p for p in (PKG / "gate").glob("*.py")
                                         if p.name != "__init__.py"]


def test_no_folder_holds_more_than_twenty_modules():
    crowded = {str(d.relative_to(PKG.parent)): n for d in [PKG, *PKG.rglob("*")] if d.is_dir()
               and (n := len([p for p in d.glob("*.py") if p.name != "__init__.py"])) > MAX_MODULES}
    assert crowded == {}


def test_each_gate_package_says_what_it_owns_and_may_import():
    """The docstring of each gate package and of advisers names its modules (``Owns:``) and
    the packages it may import (``May import:``), and the imports keep to them."""
    for folder in [*(PKG / "gate" / g for g in GATE), PKG / "advisers"]:
        doc = ast.get_docstring(ast.parse((folder / "__init__.py").read_text())) or ""
        fields = dict(line.split(": ", 1) for line in " ".join(doc.split("\n")).replace(
            " May import:", "\nMay import:").replace(" Owns:", "\nOwns:").splitlines()
            if line.startswith(("Owns: ", "May import: ")))
        fields = {k: re.sub(r" \([^)]*\)", "", v) for k, v in fields.items()}
        owned = {m.strip(" .") for m in fields.get("Owns", "").split(",")}
        modules = {p.stem for p in folder.glob("*.py") if p.name != "__init__.py"}
        assert owned == modules, folder
        allowed = {a.strip(" .").split(" ")[0] for a in fields["May import"].split(",")}
        for path in folder.glob("*.py"):
            for _, mod in imports(path, list(path.relative_to(PKG.parent).with_suffix("").parts)):
                if stage_of(mod) not in STAGES:  # outside the package, or a base module
                    continue
                stage, package = stage_of(mod), gate_package_of(mod)
                if package == folder.name or (stage == folder.name and package is None):
                    continue  # its own modules
                named = f"gate.{package}" if stage == "gate" and package else stage
                assert named in allowed or stage in allowed or ("every earlier gate package" in \
                    fields["May import"] and stage == "gate"), f"{path}: {mod} not in {allowed}"


def test_the_check_catches_a_deliberate_violation(tmp_path):
    pkg = tmp_path / "pytest_specbound"
    for stage in ("physics", "gate"):
        (pkg / stage).mkdir(parents=True)
        (pkg / stage / "__init__.py").write_text("")
    (pkg / "__init__.py").write_text("")
    (pkg / "physics" / "roofline.py").write_text(
        "def f():\n    from ..gate.verdict import judge\n    import pytest\n")
    (pkg / "gate" / "schema").mkdir()
    (pkg / "gate" / "schema" / "budget.py").write_text(
        "from pytest_specbound.gate.verdicts import thresholds\n"
        "from ..pipeline.run import GateRun\n")
    found = violations(pkg)
    assert found == ["pytest_specbound/gate/schema/budget.py:2: gate.schema imports the later "
                     "pytest_specbound.gate.pipeline.run",
                     "pytest_specbound/physics/roofline.py:2: physics imports the later "
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
