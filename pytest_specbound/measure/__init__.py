"""Stage 3, measure: prompt classes, the sampler (warm-up, one request at a time, untimed
requests), and the ratio statistics the verdict uses."""
