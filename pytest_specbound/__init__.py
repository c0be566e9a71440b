"""pytest-specbound: gate LLM-inference deploys on physics.

The core (hardware, models, roofline, measurement, verdicts) is plain Python and
never imports pytest; ``plugin.py`` is the only pytest glue.
"""

__version__ = "0.1.0"
