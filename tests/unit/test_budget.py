import pytest

from pytest_specbound.errors import ConfigError
from pytest_specbound.gate.schema.budget import load_budget

BASE = """
[model]
name = "qwen3.6-27b"
[speculative]
method = "mtp"
steps = 3
[server]
backend = "sglang"
launch = "serve --port {port}"
[classes.coding]
accept = [2.8, 3.4]
min_efficiency = 0.7
[classes.repetitive]
accept = [3.7, 4.0]
min_efficiency = 0.7
"""


def write(tmp_path, text):
    p = tmp_path / "b.toml"
    p.write_text(text)
    return p


def test_defaults_and_prompt_class_from_name(tmp_path):
    b = load_budget(write(tmp_path, BASE))
    assert b.classes["coding"].prompts == "coding" and b.classes["coding"].max_tokens == 256
    assert b.speculation.label == "mtp:3" and b.server.ready_timeout_s == 900
    assert len(b.sha256) == 64 and b.check_model


def test_per_hardware_overrides(tmp_path):
    text = BASE + """
[hardware.h100x2.server]
launch = "serve --fast --port {port}"
[hardware.h100x2.classes.coding]
min_efficiency = 0.8
"""
    b = load_budget(write(tmp_path, text))
    h = b.for_hardware("h100x2")
    assert h.server.launch == "serve --fast --port {port}"
    assert h.classes["coding"].limits.get("min_efficiency") == 0.8
    assert h.classes["coding"].accept == (2.8, 3.4)
    assert b.for_hardware("a6000x2").classes["coding"].limits.get("min_efficiency") == 0.7


@pytest.mark.parametrize(
    ("extra", "needle"),
    [
        ("[hardware.h100.classes.chat]\nmin_efficiency = 0.8\n", "unknown class; the budget has"),
        ("[hardware.h100.server]\nlaunchh = 'x'\n", "hardware.h100.server.launchh: unknown key"),
        ("[hardware.h100.classes.coding]\naccept = [3, 2]\n", "reversed band [3, 2]"),
    ],
)
def test_hardware_table_errors(tmp_path, extra, needle):
    with pytest.raises(ConfigError, match=needle.replace("[", r"\[")):
        load_budget(write(tmp_path, BASE + extra))


@pytest.mark.parametrize(
    ("old", "new", "needle"),
    [
        ('name = "qwen3.6-27b"', 'name = "qwen3.6-27b"\ngguf = "x.gguf"', "exactly one of"),
        ('launch = "serve --port {port}"', 'launch = "x"\nurl = "http://x"', "not both"),
        ("accept = [2.8, 3.4]", "accept = [0.5, 3.4]", "low must be >= 1"),
        ("accept = [2.8, 3.4]", "accept = 3", "must be [low, high]"),
        ('method = "mtp"', 'method = "draft"', "needs a draft_model"),
        ("steps = 3", "steps = 0", "0 is outside [1, inf]"),
        ('backend = "sglang"', 'backend = "sglang"\nport = 70000', "70000 is outside"),
    ],
)
def test_errors_name_the_key(tmp_path, old, new, needle):
    with pytest.raises(ConfigError) as err:
        load_budget(write(tmp_path, BASE.replace(old, new)))
    assert needle in str(err.value) and "b.toml" in str(err.value) and "\n" not in str(err.value)


def test_jsonl_prompts_relative_to_budget(tmp_path):
    (tmp_path / "mine.jsonl").write_text('{"prompt": "hi"}\n')
    b = load_budget(write(tmp_path, BASE.replace("[classes.coding]",
                                                 '[classes.coding]\nprompts = "mine.jsonl"')))
    assert b.classes["coding"].prompts == str(tmp_path / "mine.jsonl")
    with pytest.raises(ConfigError, match="no such file"):
        load_budget(write(tmp_path, BASE.replace("[classes.coding]",
                                                 '[classes.coding]\nprompts = "nope.jsonl"')))


@pytest.mark.parametrize("old, new, needle", [
    # errors found only when the class runs still name the budget's file, line and key
    ('name = "qwen3.6-27b"', 'name = "llama-3.1-8b"',
     "b.toml:5: speculative.method=mtp:3: model 'llama-3.1-8b' has no MTP head"),
    ('name = "qwen3.6-27b"', 'name = "gpt-9"', "b.toml:3: model.name=gpt-9: unknown model"),
    ('name = "qwen3.6-27b"', 'config = "missing/config.json"',
     "b.toml:3: model.config=missing/config.json: cannot read"),
])
def test_run_time_errors_name_the_budget_line(tmp_path, old, new, needle):
    from pytest_specbound.gate.pipeline.plan import roofline_for
    from pytest_specbound.physics.hardware import parse_hardware

    b = load_budget(write(tmp_path, BASE.replace(old, new)))
    with pytest.raises(ConfigError) as exc:
        roofline_for(b, parse_hardware("h100"), {})
    assert needle in str(exc.value) and "--" not in str(exc.value)


def test_a_marker_value_is_named_by_its_keyword(tmp_path):
    from pytest_specbound.gate.pipeline.plan import roofline_for
    from pytest_specbound.gate.schema.markers import marker_budget
    from pytest_specbound.physics.hardware import parse_hardware

    b, _ = marker_budget({"prompt_class": "chat", "model": "llama-3.1-8b", "speculative": "mtp:3",
                          "server": {"url": "http://127.0.0.1:1"}},
                         "t.py::test_x", tmp_path / "t.py", tmp_path)
    with pytest.raises(ConfigError, match=r"t.py::test_x: specbound\(speculative='mtp:3'\)=mtp:3: "
                                          "model 'llama-3.1-8b' has no MTP head"):
        roofline_for(b, parse_hardware("h100"), {})
