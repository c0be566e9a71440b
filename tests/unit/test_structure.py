"""The package's shape (#36): no import circle, no module over 400 lines, few long functions,
no function over 8 parameters outside the catalogs. Read from the source with ``ast``."""

from __future__ import annotations

import ast
import itertools
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PKG = ROOT / "pytest_specbound"
MAX_MODULE_LINES = 400
LONG_FUNCTION_LINES = 60
MAX_LONG_FUNCTIONS = 3
MAX_PARAMETERS = 8
# Catalog modules: a table of hardware or model data, where a row's builder may name each of its
# many fields. None needs more than 8 parameters today, so none is excused.
CATALOGS: tuple[str, ...] = ()


def modules(pkg: Path = PKG) -> dict[str, Path]:
    """Every module of the package by its dotted name (a package by its own name)."""
    found = {}
    for path in sorted(pkg.rglob("*.py")):
        parts = list(path.relative_to(pkg.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


def imported(name: str, path: Path, known: dict[str, Path]) -> Iterator[tuple[int, str]]:
    """(line, module) for every import of a package module in ``path``, wherever it stands
    (module level, a function body, under ``TYPE_CHECKING``). ``from pkg import name`` is the
    submodule where ``name`` is one, else ``pkg``. The parent packages an import runs on its
    way are not counted: only what the statement names."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            yield from ((node.lineno, a.name) for a in node.names if a.name in known)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[:len(package.split(".")) - node.level + 1]
                source = ".".join([*base, *([node.module] if node.module else [])])
            else:
                source = node.module or ""
            for alias in node.names:
                sub = f"{source}.{alias.name}"
                if sub in known:
                    yield node.lineno, sub
                elif source in known:
                    yield node.lineno, source


def import_graph(pkg: Path = PKG) -> dict[str, dict[str, int]]:
    """module -> {imported module: the line of its first import}."""
    known = modules(pkg)
    graph: dict[str, dict[str, int]] = {}
    for name, path in known.items():
        edges = graph.setdefault(name, {})
        for line, target in imported(name, path, known):
            if target != name:
                edges.setdefault(target, line)
    return graph


def cycles(graph: dict[str, dict[str, int]]) -> list[list[str]]:
    """One cycle through each strongly connected group of modules (Tarjan), as a module path
    that ends where it starts."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: list[set[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph.get(v, {}):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = set()
            while True:
                w = stack.pop()
                on_stack.discard(w)
                group.add(w)
                if w == v:
                    break
            if len(group) > 1:
                groups.append(group)

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return [_cycle_in(sorted(group)[0], group, graph) for group in groups]


def _cycle_in(start: str, group: set[str], graph: dict[str, dict[str, int]]) -> list[str]:
    """A shortest path from ``start`` back to itself inside ``group`` (breadth first)."""
    came: dict[str, str] = {}
    frontier = [start]
    while frontier:
        nxt = []
        for v in frontier:
            for w in sorted(graph[v]):
                if w not in group or w in came:
                    continue
                came[w] = v
                if w == start:
                    path = [start]
                    while path[-1] != start or len(path) == 1:
                        path.append(came[path[-1]])
                    return path[::-1]
                nxt.append(w)
        frontier = nxt
    raise AssertionError(f"no cycle through {start}")


def _shown(cycle: list[str], graph: dict[str, dict[str, int]], known: dict[str, Path]) -> str:
    """Each step of ``cycle`` with the file and line of its import."""
    root = known["pytest_specbound"].parents[1]
    steps = [f"{a} ({known[a].relative_to(root)}:{graph[a][b]}) -> {b}"
             for a, b in itertools.pairwise(cycle)]
    return "; ".join(steps)


def functions(tree: ast.AST, prefix: str = "") -> Iterator[tuple[str, ast.FunctionDef | ast.AsyncFunctionDef]]:
    """(qualified name, node) of every function and method, nested ones included."""
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            yield prefix + node.name, node
            yield from functions(node, f"{prefix}{node.name}.")
        elif isinstance(node, ast.ClassDef):
            yield from functions(node, f"{prefix}{node.name}.")
        else:
            yield from functions(node, prefix)


def parameters(node: ast.FunctionDef | ast.AsyncFunctionDef) -> int:
    """Every parameter but a leading self/cls; ``*args`` and ``**kwargs`` count one each."""
    a = node.args
    named = [p.arg for p in (*a.posonlyargs, *a.args)]
    own = 1 if named and named[0] in ("self", "cls") else 0
    return len(named) - own + len(a.kwonlyargs) + (a.vararg is not None) + (a.kwarg is not None)


def every_function(pkg: Path = PKG) -> Iterator[tuple[str, str, ast.FunctionDef | ast.AsyncFunctionDef]]:
    """(dotted module, ``file:function``, node) across the package."""
    for name, path in modules(pkg).items():
        rel = path.relative_to(pkg.parent)
        for qualname, node in functions(ast.parse(path.read_text(encoding="utf-8"))):
            yield name, f"{rel}:{qualname}", node


def test_no_import_cycle():
    graph = import_graph()
    known = modules()
    found = [_shown(c, graph, known) for c in cycles(graph)]
    assert found == [], "import cycles:\n" + "\n".join(found)


def test_no_module_over_400_lines():
    long = [f"{path.relative_to(ROOT)}: {n} lines" for path in modules().values()
            if (n := len(path.read_text(encoding="utf-8").splitlines())) > MAX_MODULE_LINES]
    assert long == [], "modules over 400 lines:\n" + "\n".join(long)


def test_at_most_three_functions_over_60_lines():
    long = [f"{where}: {n} lines" for _mod, where, node in every_function()
            if (n := (node.end_lineno or node.lineno) - node.lineno + 1) > LONG_FUNCTION_LINES]
    assert len(long) <= MAX_LONG_FUNCTIONS, (f"{len(long)} functions over 60 lines (at most "
                                             f"{MAX_LONG_FUNCTIONS}):\n" + "\n".join(long))


def test_no_function_over_8_parameters_outside_the_catalogs():
    many = [f"{where}: {n} parameters" for mod, where, node in every_function()
            if mod not in CATALOGS and (n := parameters(node)) > MAX_PARAMETERS]
    assert many == [], "functions over 8 parameters:\n" + "\n".join(many)


def test_the_cycle_check_sees_every_kind_of_import(tmp_path):
    pkg = tmp_path / "pytest_specbound"
    (pkg / "serving").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "serving" / "__init__.py").write_text("")
    (pkg / "serving" / "a.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .b import B\n")
    (pkg / "serving" / "b.py").write_text("def f():\n    from pytest_specbound.serving import c\n")
    (pkg / "serving" / "c.py").write_text("import pytest_specbound.serving.a\n")
    (pkg / "serving" / "d.py").write_text("from pytest_specbound.serving import a\n")
    graph = import_graph(pkg)
    assert cycles(graph) == [["pytest_specbound.serving.a", "pytest_specbound.serving.b",
                              "pytest_specbound.serving.c", "pytest_specbound.serving.a"]]
    assert _shown(cycles(graph)[0], graph, modules(pkg)).startswith(
        "pytest_specbound.serving.a (")


def test_parameters_count_args_and_kwargs_once_and_skip_self():
    tree = ast.parse("class C:\n    def m(self, a, *b, c, **d): pass\ndef f(x, /, y=1): pass\n")
    counts = {name: parameters(node) for name, node in functions(tree)}
    assert counts == {"C.m": 4, "f": 2}


def test_a_threshold_is_named_in_at_most_three_modules():
    """A threshold is declared once (gate/verdicts/thresholds.py) and iterated by the budget parser, the
    rule, the judge, the result and the table: its key does not spread through the package."""
    from pytest_specbound.gate.verdicts.thresholds import SPECS

    assert "min_goodput" in {s.key for s in SPECS}
    named = [str(p.relative_to(PKG)) for p in modules().values()
             if "min_goodput" in p.read_text(encoding="utf-8")]
    assert len(named) <= 3, named


def test_every_threshold_reaches_the_budget_keys_and_the_results_json():
    """What iterating the specs gives: each key is a class key and a level key, and each has
    its field in a result's JSON, read back the same."""
    from pytest_specbound.gate.schema.class_budget import class_keys, level_keys
    from pytest_specbound.gate.verdicts.result import ClassResult
    from pytest_specbound.gate.verdicts.thresholds import SPECS
    from pytest_specbound.gate.verdicts.verdict import Verdict

    limits = {s.key: (1.5, 2.5) if s.band else 0.5 for s in SPECS}
    result = ClassResult("b.toml", "chat", "cpu", Verdict("pass"), limits=limits)
    doc = result.to_json()
    for s in SPECS:
        assert s.key in class_keys() and s.key in level_keys()
        assert s.field in doc
    assert ClassResult.from_json(doc).limits == limits


def test_the_architecture_page_names_every_module():
    text = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    missing = [name for name in modules() if name.count(".") >= 1
               and not name.rsplit(".", 1)[-1].startswith("__")
               and name.rsplit(".", 1)[-1] not in text]
    assert not missing, f"docs/architecture.md does not name: {missing}"
