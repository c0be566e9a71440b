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
    # every folder of tests runs: the unit and fault tests on two xdist workers, then the
    # plugin tests and the real servers one at a time (timing is what they test), with the
    # durations
    runs = [part.strip() for part in tests.split("&&") if part.strip().startswith("python -m pytest")]
    folders = {p.name for p in (ROOT / "tests").iterdir() if p.is_dir() and any(p.glob("test_*.py"))}
    assert {word.removeprefix("tests/") for run in runs for word in run.split()} >= folders, runs
    assert runs[-1] == "python -m pytest tests/plugin tests/integration --durations=20", runs
    assert "-n" not in runs[-1].split()


def test_ci_runs_the_readmes_test_command_exactly():
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    # .ci/run reads the line under the README's '# 2. the test suite' comment
    assert "test_command=$(sed -n '/^# 2\\. the test suite/{n;p;q}' README.md)" in ci, \
        "the CI script reads the test command from the README"
    lines = README.splitlines()
    (at,) = [n for n, line in enumerate(lines) if line.startswith("# 2. the test suite")]
    assert lines[at + 1] == commands()[1]


def test_every_link_in_the_docs_resolves_inside_the_repository():
    pages = [ROOT / "README.md", ROOT / "CHANGELOG.md", *sorted((ROOT / "docs").glob("*.md"))]
    for page in pages:
        text = page.read_text(encoding="utf-8")
        assert "shared/" not in text, f"{page.name} cites a file outside the repository"
        for target in re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", text):
            if "://" in target:
                continue
            assert (page.parent / target).exists(), f"{page.name} links to missing {target}"
