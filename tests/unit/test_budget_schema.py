"""Every key of the budget schema either takes effect or is an error naming file:line:key."""

from __future__ import annotations

from pathlib import Path

import pytest

from pytest_specbound.errors import ConfigError
from pytest_specbound.gate.schema import budget as schema
from pytest_specbound.gate.schema.budget import load_budget
from pytest_specbound.gate.schema.twin_table import TWIN_KEYS

BASE = {
    "model": 'name = "llama-3.1-8b"',
    "speculative": 'method = "eagle3"',
    "server": 'launch = "serve --port {port}"',
    "roofline": "",
    "classes.chat": "max_tokens = 64",
}
# table -> key -> (TOML value, what the parsed Budget must show)
MODEL = {"name": ('"qwen3-8b"', lambda b: b.model.spec == "qwen3-8b"),
         "dtype": ('"fp8"', lambda b: b.model.dtype == "fp8"),
         "served_name": ('"Q"', lambda b: b.model.served_name == "Q")}
SPEC = {"method": ('"mtp"', lambda b: b.speculation.method == "mtp"),
        "steps": ("5", lambda b: b.speculation.steps == 5),
        "draft_tokens": ("9", lambda b: b.speculation.draft_tokens == 9),
        "draft_model": ('"qwen3-0.6b"', lambda b: b.draft_model.spec == "qwen3-0.6b"),
        "draft_dtype": ('"fp8"', lambda b: b.draft_model.dtype == "fp8")}
SERVER = {
    "backend": ('"vllm"', lambda s: s.backend == "vllm"),
    "ready_timeout_s": ("33", lambda s: s.ready_timeout_s == 33),
    "read_timeout_s": ("7.5", lambda s: s.read_timeout_s == 7.5),
    "api_key_env": ('"MY_KEY"', lambda s: s.api_key_env == "MY_KEY"),
    "host": ('"127.0.0.2"', lambda s: s.host == "127.0.0.2"),
    "port": ("8123", lambda s: s.port == 8123),
    "env": ('{ A = "1" }', lambda s: s.env == (("A", "1"),)),
    "cwd": ('"/srv"', lambda s: s.cwd == "/srv"),
    "model_id": ('"m"', lambda s: s.model_id == "m"),
    "check_model": ("false", lambda s: s.check_model is False),
    "check_settings": ("false", lambda s: s.check_settings is False),
    "ca_bundle": ('"ca.pem"', lambda s: s.ca_bundle and s.ca_bundle.endswith("ca.pem")),
    "launch": ('"other --port {port}"', lambda s: s.launch == "other --port {port}"),
}
CLASS = {"prompts": ('"coding"', lambda c: c.prompts == "coding"),
         "max_tokens": ("77", lambda c: c.max_tokens == 77),
         "accept": ("[2.0, 3.0]", lambda c: c.accept == (2.0, 3.0)),
         "min_efficiency": ("0.6", lambda c: c.limits.get("min_efficiency") == 0.6),
         "min_tok_s": ("12", lambda c: c.limits.get("min_tok_s") == 12),
         "max_ttft_ms": ("250", lambda c: c.limits.get("max_ttft_ms") == 250),
         "samples": ("9", lambda c: c.samples == 9),
         "warmup": ("0", lambda c: c.warmup == 0),
         "concurrency": ("[1, 4]", lambda c: c.concurrency == (1, 4)),
         "require_no_throttle": ("true", lambda c: c.require_no_throttle is True),
         "resolution": ("0.1", lambda c: c.resolution == 0.1),
         "min_speedup": ("1.2", lambda c: c.limits.get("min_speedup") == 1.2),
         "temperature": ("0.7", lambda c: c.sampling.temperature == 0.7),
         "top_p": ("0.9", lambda c: c.sampling.top_p == 0.9),
         "top_k": ("20", lambda c: c.sampling.top_k == 20),
         "min_p": ("0.05", lambda c: c.sampling.min_p == 0.05),
         "seed": ("7", lambda c: c.sampling.seed == 7),
         "max_tpot_ms": ("30", lambda c: c.limits.get("max_tpot_ms") == 30),
         "tpot_percentile": ("95", lambda c: c.tpot_percentile == 95),
         "min_goodput": ("0.9\nmax_ttft_ms = 100", lambda c: c.limits.get("min_goodput") == 0.9),
         "category": ('"writing"\nprompts = "mt.jsonl"', lambda c: c.category == ("writing",)),
         "pin_accept": ("3.0", lambda c: c.pin_accept == 3.0),
         "turns": ('"replay"\nprompts = "mt.jsonl"', lambda c: c.turns == "replay")}
TWIN = {"launch": ('"plain --port {port}"', lambda t: t.launch == "plain --port {port}"),
        "url": ('"http://127.0.0.1:9"', lambda t: t.url == "http://127.0.0.1:9"
                and t.origin.endswith(":12: no_speculation.url")),
        "ready_timeout_s": ("45", lambda t: t.ready_timeout_s == 45),
        "recheck": ("0", lambda t: t.recheck == 0)}
ROOFLINE = {"context": ("0", lambda b: b.context == 0),
            "overhead_ms": ("0", lambda b: b.overhead_ms == 0),
            "draft_step_ms": ("0.4", lambda b: b.draft_step_ms == 0.4),
            "batch": ("4", lambda b: b.batch == 4),
            "threads": ("2", lambda b: b.threads == 2)}


def write(tmp_path: Path, tables: dict[str, str]) -> Path:
    text = "".join(f"[{name}]\n{body}\n" for name, body in tables.items())
    path = tmp_path / "b.toml"
    path.write_text(text)
    return path


def test_the_walk_covers_the_whole_schema():
    assert set(MODEL) == schema.MODEL_KEYS - {"config", "gguf"}
    assert set(SPEC) == schema.SPEC_KEYS
    assert set(SERVER) == schema.SERVER_KEYS - {"url"}  # url excludes launch: its own test
    assert set(CLASS) == schema.class_keys()
    assert set(ROOFLINE) == schema.ROOFLINE_KEYS
    assert set(TWIN) == TWIN_KEYS


@pytest.mark.parametrize("key", sorted(TWIN))
def test_no_speculation_keys_reach_the_twin(tmp_path, key):
    value, check = TWIN[key]
    b = load_budget(write(tmp_path, {**BASE, "no_speculation": f"{key} = {value}"}))
    assert b.no_speculation is not None and check(b.no_speculation)


def test_an_empty_no_speculation_table_asks_for_the_derived_twin(tmp_path):
    b = load_budget(write(tmp_path, {**BASE, "no_speculation": ""}))
    assert b.no_speculation is not None and not b.no_speculation.launch
    assert load_budget(write(tmp_path, BASE)).no_speculation is None


@pytest.mark.parametrize(("body", "needle"), [
    ('launch = "a"\nurl = "http://h:1"', r"no_speculation\.url: give launch or url, not both"),
    ("ready_timeout_s = 0", r"no_speculation\.ready_timeout_s"),
    ("recheck = 1", r"no_speculation\.recheck: give 0 \(no drift check\) or 2 to 64"),
    ("recheck = 65", r"no_speculation\.recheck: 65 is outside \[0, 64\]"),
    ("recheck = 2.5", r"no_speculation\.recheck: must be an integer"),
    ("bogus = 1", r"no_speculation\.bogus: unknown key"),
    ('url = "ftp://h"', r"no_speculation\.url=ftp://h"),
])
def test_no_speculation_errors_name_the_line(tmp_path, body, needle):
    with pytest.raises(ConfigError, match=r"b\.toml:1[23]: " + needle):
        load_budget(write(tmp_path, {**BASE, "no_speculation": body}))


@pytest.mark.parametrize(("table", "key"), [(t, k) for t, keys in
                                            (("model", MODEL), ("speculative", SPEC),
                                             ("roofline", ROOFLINE)) for k in keys])
def test_top_level_keys_reach_the_budget(tmp_path, table, key):
    value, check = {"model": MODEL, "speculative": SPEC, "roofline": ROOFLINE}[table][key]
    tables = dict(BASE)
    lines = [ln for ln in tables[table].splitlines() if not ln.startswith(key + " ")]
    if table == "model" and key == "name":
        lines = []
    if key == "draft_dtype":
        lines.append('draft_model = "qwen3-0.6b"')
    tables[table] = "\n".join([*lines, f"{key} = {value}"])
    assert check(load_budget(write(tmp_path, tables)))


@pytest.mark.parametrize("key", sorted(SERVER))
@pytest.mark.parametrize("where", ["server", "hardware.h100.server"])
def test_server_keys_reach_the_server_config(tmp_path, key, where):
    value, check = SERVER[key]
    tables = dict(BASE)
    if where == "server":
        tables["server"] = ("" if key == "launch" else BASE["server"] + "\n") + f"{key} = {value}"
        b = load_budget(write(tmp_path, tables))
    else:
        tables[where] = f"{key} = {value}"
        b = load_budget(write(tmp_path, tables)).for_hardware("h100")
    assert check(b.server)


@pytest.mark.parametrize("key", sorted(CLASS))
@pytest.mark.parametrize("where", ["classes.chat", "hardware.h100.classes.chat"])
def test_class_keys_reach_the_class_budget(tmp_path, key, where):
    value, check = CLASS[key]
    (tmp_path / "mt.jsonl").write_text('{"turns": ["x"], "category": "writing"}\n')
    tables = dict(BASE)
    tables[where] = (BASE["classes.chat"] + "\n" if key != "max_tokens" and "hardware" not in where
                     else "") + f"{key} = {value}"
    b = load_budget(write(tmp_path, tables))
    assert check(b.for_hardware("h100").classes["chat"])


def test_url_reaches_the_server_config_and_names_its_line(tmp_path):
    tables = dict(BASE, server='url = "http://127.0.0.1:9"')
    b = load_budget(write(tmp_path, tables))
    assert b.server.url == "http://127.0.0.1:9" and b.server.origin.endswith(":6: server.url")


def test_a_url_that_is_not_http_is_an_error_naming_the_line(tmp_path):
    tables = dict(BASE, server='url = "ftp://127.0.0.1:9"')
    with pytest.raises(ConfigError, match=r"b\.toml:6: server\.url=ftp://127.0.0.1:9: expected http"):
        load_budget(write(tmp_path, tables))


def test_unknown_keys_are_errors_everywhere(tmp_path):
    for table in ("model", "speculative", "server", "roofline", "classes.chat",
                  "hardware.h100.server", "hardware.h100.classes.chat"):
        tables = dict(BASE)
        tables[table] = tables.get(table, "") + "\nbogus = 1"
        with pytest.raises(ConfigError, match=rf"{table}\.bogus: unknown key"):
            load_budget(write(tmp_path, tables))


def test_draft_dtype_without_a_draft_model_or_a_head_is_an_error(tmp_path):
    tables = dict(BASE, speculative='method = "ngram"\ndraft_dtype = "q8_0"')
    with pytest.raises(ConfigError, match=r"b\.toml:5: speculative\.draft_dtype: needs a draft_model"
                       r" or a drafting head"):
        load_budget(write(tmp_path, tables))
    tables = dict(BASE, speculative='method = "eagle3"\ndraft_dtype = "q8_0"')  # the head's dtype
    assert load_budget(write(tmp_path, tables)).head_dtype == "q8_0"
    tables = dict(BASE, speculative='method = "eagle3"\ndraft_dtype = "q9"')
    with pytest.raises(ConfigError, match=r"b\.toml:5: speculative\.draft_dtype=q9: unknown dtype"):
        load_budget(write(tmp_path, tables))


def test_error_lines_survive_comments_after_headers_and_dotted_keys(tmp_path):
    path = tmp_path / "c.toml"
    path.write_text('[model]   # the target\nname = "llama-3.1-8b"\n[server]\nlaunch = "x"\n'
                    '[classes]  # the prompt classes\nchat.accept = [3.4, 2.8]\n')
    with pytest.raises(ConfigError, match=r"c\.toml:6: classes\.chat\.accept: reversed band"):
        load_budget(path)
    path.write_text('model.name = "llama-3.1-8b"\nmodel.dtype = "fp7"\nserver.launch = "x"\n'
                    '[classes.chat]\n')
    with pytest.raises(ConfigError, match=r"c\.toml:2: model\.dtype"):
        load_budget(path)
