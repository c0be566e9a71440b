"""``@pytest.mark.specbound(...)`` keywords -> a Budget, through the budget file's own parser.

A marker is a budget written in Python: its keywords become the tables of a budget file and go
through :func:`parse_budget`, so every field means the same in both and is validated the same
way. Errors name the test and the keyword instead of a file line. No pytest import here.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from pytest_specbound._toml import TomlTable
from pytest_specbound.errors import ConfigError
from pytest_specbound.gate.schema.budget import Budget, class_keys, load_budget, parse_budget
from pytest_specbound.gate.schema.where import Where
from pytest_specbound.physics.speculative import parse_speculation

OWN_MARKER_KEYS = ("prompt_class", "server", "budget", "model", "dtype", "speculative",
                   "draft_model", "draft_dtype", "served_name", "no_speculation")


def marker_keys() -> tuple[str, ...]:
    """The marker's keywords: a class table's keys (every declared threshold's too) and its own."""
    return (OWN_MARKER_KEYS[0], *sorted(class_keys()), *OWN_MARKER_KEYS[1:])
DEFAULT_CLASS = "chat"


class MarkerWhere(Where):
    """Names ``test: specbound(keyword=...)`` where a budget file would name file:line: key."""

    def __init__(self, nodeid: str, path: Path, keywords: TomlTable) -> None:
        super().__init__(path, "", nodeid)
        self.keywords = keywords

    def keyword_for(self, table: str | None, key: str) -> str:
        table = table or ""
        if table.startswith("classes.") or table == "classes":
            return key or "prompt_class"
        if table == "model":
            return {"name": "model", "config": "model", "gguf": "model"}.get(key, key or "model")
        if table == "speculative":
            return {"draft_model": "draft_model", "draft_dtype": "draft_dtype"}.get(
                key, "speculative")
        if table in ("server", "no_speculation"):
            return f"{table}[{key!r}]" if key else table
        return key or table

    def name(self, table: str | None, key: str) -> str:
        keyword = self.keyword_for(table, key)
        base = keyword.split("[")[0]
        value = self.keywords.get(base)
        shown = f"{keyword}={value!r}" if value is not None and "[" not in keyword else keyword
        return f"{self.display}: specbound({shown})"


def marker_tables(kw: TomlTable, where: MarkerWhere) -> tuple[TomlTable, str]:
    """The budget tables the keywords stand for, and the class name."""
    valid, class_table = marker_keys(), class_keys()
    unknown = sorted(set(kw) - set(valid))
    if unknown:
        raise ConfigError(f"{where.display}: specbound: unknown keyword '{unknown[0]}'; valid: "
                          f"{', '.join(valid)}")
    name = str(kw.get("prompt_class") or DEFAULT_CLASS)
    cls: TomlTable = {k: (list(v) if k in ("accept", "concurrency") and isinstance(v, tuple)
                               else v)
                           for k, v in kw.items() if k in class_table}
    cls.setdefault("prompts", name)
    model_t: TomlTable = {}
    if kw.get("model") is not None:
        model = str(kw["model"])
        field = "gguf" if model.endswith(".gguf") else "config" if model.endswith(".json") \
            else "name"
        model_t[field] = model
    else:
        model_t["name"] = "unknown"
    for key in ("dtype", "served_name"):
        if kw.get(key) is not None:
            model_t[key] = kw[key]
    server = kw.get("server")
    if server is not None and not isinstance(server, dict):
        raise where.error("server", "", "must be a dict of [server] keys, e.g. "
                          "server={'url': 'http://127.0.0.1:8000'}")
    if server and "served_name" not in model_t and server.get("model_id"):
        model_t["served_name"] = server["model_id"]
    spec_t: TomlTable = {}
    if kw.get("speculative") is not None:
        text = kw["speculative"]
        if not isinstance(text, str):
            raise where.error("speculative", "method", "must be a string like 'mtp:3' or "
                              "'eagle3:6:10' (METHOD[:STEPS[:DRAFT_TOKENS]])")
        try:
            spec = parse_speculation(text, origin=where.name("speculative", "method"))
        except ConfigError as exc:
            raise ConfigError(str(exc).replace(f"={text}:", ":", 1)) from None
        spec_t = {"method": spec.method}
        if spec.method != "none":
            spec_t.update(steps=spec.steps, draft_tokens=spec.draft_tokens)
    for key in ("draft_model", "draft_dtype"):
        if kw.get(key) is not None:
            spec_t[key] = kw[key]
    data: TomlTable = {"model": model_t, "classes": {name: cls}}
    if spec_t:
        data["speculative"] = spec_t
    if server:
        data["server"] = dict(server)
    twin = kw.get("no_speculation")
    if twin is not None:
        if not isinstance(twin, dict):
            raise where.error("no_speculation", "", "must be a dict of [no_speculation] keys, "
                              "e.g. no_speculation={} (derived) or {'url': 'http://...'}")
        data["no_speculation"] = dict(twin)
    return data, name


def marker_budget(kw: TomlTable, nodeid: str, test_path: Path, rootpath: Path) -> tuple[Budget, str]:
    """Parse a marker's keywords (plus call-time overrides) into a Budget and the class name.

    With ``budget=FILE`` the file gives model, speculation and server; the marker's class
    keywords add to (or override) that file's class of the same name.
    """
    where = MarkerWhere(nodeid, test_path, kw)
    data, name = marker_tables(kw, where)
    if kw.get("budget"):
        base = load_budget(rootpath / str(kw["budget"]))
        cls = data["classes"][name]
        if name in base.classes and "prompts" not in kw:
            cls["prompts"] = base.classes[name].prompts
        extra = parse_budget({"model": {"name": "x"}, "classes": {name: cls}}, test_path,
                             where=where, require_server=False).classes[name]
        if name in base.classes:  # the file's class, with the keywords the marker gives
            class_table = class_keys()
            extra = base.classes[name].with_values(
                {k: extra.value_of(k) for k in kw if k in class_table})
        return replace(base, classes={**base.classes, name: extra}), name
    return parse_budget(data, test_path, where=where, require_server=False), name
