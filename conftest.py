"""Root conftest: the plugin's own tests drive pytest through ``pytester`` (tests/conftest.py
gives the test session a CPU-probe cache of its own; the README's demo, run from this folder,
uses the user's cache like any other project)."""

pytest_plugins = ["pytester"]
