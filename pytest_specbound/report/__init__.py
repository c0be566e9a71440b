"""Reports: terminal table, results JSON, markdown step summary, pytest-benchmark JSON, plot."""
