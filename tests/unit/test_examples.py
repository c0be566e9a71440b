"""The example CI workflows stay true to the plugin: every flag they pass exists, and the merge
step's command is one the CLI accepts."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from pytest_specbound.cli import build_parser
from pytest_specbound.gate.schema.settings import OPTIONS

WORKFLOWS = sorted((Path(__file__).resolve().parents[2] / "examples" / ".github" / "workflows")
                   .glob("*.yml"))


@pytest.mark.parametrize("path", WORKFLOWS, ids=[p.name for p in WORKFLOWS])
def test_workflow_flags_are_the_plugins(path):
    text = path.read_text()
    known = {o.flag for o in OPTIONS}
    used = set(re.findall(r"--specbound-[a-z-]+", text))
    assert used, f"{path.name} passes no --specbound flag"
    assert used <= known, f"{path.name}: unknown flags {sorted(used - known)}"


def test_matrix_workflow_merges_every_runner_with_report():
    text = (WORKFLOWS[0].parent / "specbound-matrix.yml").read_text()
    assert "fail-fast: false" in text and text.count("if: always()") >= 2
    merge = [line.strip() for line in text.splitlines() if line.strip().startswith("specbound report")]
    assert merge, "the merge job runs specbound report"
    for line in merge:  # each is a command the CLI parses (the shell expands the glob)
        argv = line.split(">>")[0].split("#")[0].split()[1:]
        args = build_parser().parse_args([a if "*" not in a else "r.json" for a in argv])
        assert args.command == "report"
