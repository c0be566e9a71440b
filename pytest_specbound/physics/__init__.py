"""Stage 1, physics: hardware (catalog, CPU probes, NVML), models (catalog, config.json, GGUF),
dtypes, speculative methods, allreduce, and the per-round roofline."""
