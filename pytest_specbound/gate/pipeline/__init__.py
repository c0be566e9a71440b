"""Measuring a class: the plan made up front, the server pool, the server made ready and
checked before measuring, the one-measurement lock,
the runner that measures and judges, the twins measured once per run, and :class:`GateRun`.

Owns: plan, ready, run, runner, pool, measure_lock, crosscheck, random_workload, twins.
May import: physics, serving, measure, every earlier gate package.
"""
