"""What a class is compared with, and the comparisons themselves: a reference is a sample
measured or read once per run (the twin without speculation, the last accepted run), a
comparison the tests, evaluation and JSON it adds to a class.

Owns: reference, comparison (the two protocols), store (once per run across workers),
against_twin, against_earlier, baseline, identity, drift.
May import: physics, serving, measure, gate.verdicts, gate.schema.
"""
