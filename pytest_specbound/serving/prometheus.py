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
