"""Stage 4, gate: budget schema (files and markers through one parser), settings, the server pool
and measurement lock, the sequential runner, verdicts with their diagnosis, calibration."""
