"""Root conftest: the plugin's own tests drive pytest through ``pytester``."""

pytest_plugins = ["pytester"]
