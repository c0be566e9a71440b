"""The words of a verdict: the threshold table, reasons and statuses, evaluations and the
:class:`ClassResult` a class ends as.

Owns: thresholds (one declaration each), verdict, evaluate, result.
May import: physics, serving, measure (no other gate package).
"""
