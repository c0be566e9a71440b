"""The budget schema: budget TOML files and markers through one parser, a class's keys, the
twin's table, disaggregated budgets, and the run's settings (options, environment, ini).

Owns: budget, class_budget, where, twin_table, disaggregated, markers, settings.
May import: physics, serving, measure, gate.verdicts (the threshold table the parser reads).
"""
