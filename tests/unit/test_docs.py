"""The README a newcomer reads: short, its two commands self-contained, CI running the second."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text(encoding="utf-8")


def commands() -> list[str]:
    block = README.split("```bash\n", 1)[1].split("```", 1)[0]
    return [line for line in block.splitlines() if line and not line.startswith("#")]


def test_the_readme_is_read_in_five_minutes():
    assert len(README.splitlines()) <= 200


def test_each_command_builds_its_own_venv_and_installs_what_it_needs():
    main, tests = commands()
    for line in (main, tests):
        assert line.startswith("python3 -m venv .venv && . .venv/bin/activate && CMAKE_ARGS=")
        assert " pip install -e '.[" in line
        # llama.cpp built portable: a native build dies of SIGILL on another CPU or in a VM
        assert 'CMAKE_ARGS="-DGGML_NATIVE=OFF ' in line
    assert main.endswith("pytest --specbound-hw=cpu budgets/cpu-demo.toml")
    assert tests.endswith("python -m pytest tests")


def test_ci_runs_the_readmes_test_command_exactly():
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    pattern = re.search(r"grep -m1 '(.+)' README.md", ci)
    assert pattern, "the CI script reads the test command from the README"
    found = [line for line in README.splitlines() if re.match(pattern.group(1), line)]
    assert found[:1] == [commands()[1]]


def test_every_link_in_the_docs_resolves_inside_the_repository():
    pages = [ROOT / "README.md", ROOT / "CHANGELOG.md", *sorted((ROOT / "docs").glob("*.md"))]
    for page in pages:
        text = page.read_text(encoding="utf-8")
        assert "shared/" not in text, f"{page.name} cites a file outside the repository"
        for target in re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", text):
            if "://" in target:
                continue
            assert (page.parent / target).exists(), f"{page.name} links to missing {target}"
