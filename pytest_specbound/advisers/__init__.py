"""Stage 5, advisers: tools that run the gate to advise rather than to judge: ``plan-spec``
(the number of draft tokens from the twin and two step counts, and its brute-force sweep) and
``calibrate`` (thresholds proposed from a measurement).

Owns: spec_plan, spec_sweep, against_sweep, calibrate.
May import: physics, serving, measure, gate.
"""
