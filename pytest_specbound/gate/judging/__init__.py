"""Judging a measurement: the sequential stopping rule over every threshold and comparison,
the judge that turns its decisions into a verdict and a diagnosis, the pinned-acceptance check,
and the rule's simulation.

Owns: rule, judge, pinned, simulate.
May import: physics, serving, measure, gate.verdicts, gate.schema, gate.references.
"""
