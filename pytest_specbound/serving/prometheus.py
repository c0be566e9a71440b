"""Prometheus text exposition -> counter totals, through prometheus_client's own parser."""

from __future__ import annotations

from collections.abc import Iterable


def counter_totals(text: str, names: Iterable[str]) -> dict[str, float]:
    """Sum each named sample over all its label sets (``vllm bench serve`` does the same)."""
    from prometheus_client.parser import text_string_to_metric_families

    wanted = set(names)
    totals: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name in wanted:
                totals[sample.name] = totals.get(sample.name, 0.0) + float(sample.value)
    return totals


def counter_delta(before: dict[str, float], after: dict[str, float]) -> dict[str, float] | None:
    """How much each counter grew; None when one went down (the server restarted between the
    two reads, and its counters started again from zero: no delta spans that)."""
    if any(after[k] < before[k] for k in after.keys() & before.keys()):
        return None
    return {k: after[k] - before.get(k, 0.0) for k in after}
