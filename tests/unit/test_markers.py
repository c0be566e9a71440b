"""Markers are budgets written in Python: the same parser, errors naming test and keyword."""

from __future__ import annotations

from pathlib import Path

import pytest

from pytest_specbound.errors import ConfigError
from pytest_specbound.gate.schema.markers import marker_budget

NODE = "tests/test_x.py::test_gate"


def parse(**kw):
    return marker_budget(kw, NODE, Path("tests/test_x.py"), Path("."))


def test_tree_speculation_keeps_its_draft_tokens():
    budget, name = parse(speculative="eagle3:6:10", server={"url": "http://127.0.0.1:1"})
    assert (budget.speculation.steps, budget.speculation.draft_tokens) == (6, 10)
    assert name == "chat"


def test_bad_speculation_names_test_and_keyword():
    with pytest.raises(ConfigError) as exc:
        parse(speculative="mtp:x")
    text = str(exc.value)
    assert text.startswith(f"{NODE}: specbound(speculative='mtp:x')")
    assert "whole numbers" in text and "\n" not in text


def test_class_keywords_go_through_the_budget_checks():
    with pytest.raises(ConfigError, match=r"test_gate: specbound\(accept=\(3\.4, 2\.8\)\): reversed"):
        parse(accept=(3.4, 2.8))
    with pytest.raises(ConfigError, match=r"specbound\(prompts='poems'\): unknown prompt set .* "
                                          r"valid: coding, chat, repetitive, long"):
        parse(prompts="poems")
    with pytest.raises(ConfigError, match=r"specbound\(server\['backend'\]\): unknown backend"):
        parse(server={"url": "http://127.0.0.1:1", "backend": "vlm"})
    with pytest.raises(ConfigError, match=r"unknown keyword 'acept'; valid: prompt_class, accept"):
        parse(acept=(1, 2))


def test_every_class_key_of_the_budget_schema_is_a_marker_keyword():
    from pytest_specbound.gate.schema.budget import class_keys
    from pytest_specbound.gate.schema.markers import marker_keys

    assert set(marker_keys()) >= class_keys()
    budget, _ = parse(warmup=0, samples=7, max_ttft_ms=100, min_tok_s=5)
    cls = budget.classes["chat"]
    limits = cls.limits
    assert (cls.warmup, cls.samples, limits.get("max_ttft_ms"), limits.get("min_tok_s")) == \
        (0, 7, 100, 5)


def test_a_marker_without_a_server_fails_at_once_naming_the_test():
    from pytest_specbound.gate.pipeline.plan import server_config
    from pytest_specbound.gate.schema.settings import resolve

    budget, _ = parse()
    settings = resolve({}, {}, lambda name: None)
    with pytest.raises(ConfigError, match=rf"^{NODE}: specbound\(server\): no server to measure"):
        server_config(budget, settings)


def test_a_marker_names_its_twin_and_min_speedup():
    budget, name = parse(speculative="eagle3:3", server={"launch": "vllm serve m --port {port}"},
                         min_speedup=1.2, no_speculation={"url": "http://127.0.0.1:9"})
    assert budget.classes[name].limits.get("min_speedup") == 1.2
    assert budget.no_speculation is not None and budget.no_speculation.url == "http://127.0.0.1:9"
    budget, _ = parse(speculative="eagle3:3", no_speculation={})
    assert budget.no_speculation is not None and budget.no_speculation.launch is None
    with pytest.raises(ConfigError, match=r"specbound\(no_speculation\['bogus'\]\)"):
        parse(speculative="eagle3:3", no_speculation={"bogus": 1})
    with pytest.raises(ConfigError, match=r"specbound\(no_speculation='http://x'\): must be a dict"):
        parse(speculative="eagle3:3", no_speculation="http://x")
