"""Stage 6, report: terminal table and progress, results JSON, benchmark JSON, markdown, plot."""
