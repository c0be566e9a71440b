"""Stage 4, gate: a class's budget measured and judged, in five packages taken in this order
(each imports only the ones before it): ``verdicts`` (the words of a verdict: thresholds,
reasons, the result), ``schema`` (budgets, markers and settings parsed), ``references`` (what a
class is compared with: the twin without speculation, the last accepted run), ``judging`` (the
sequential rule and the judge) and ``pipeline`` (planning, servers, measuring, one run)."""
