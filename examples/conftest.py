"""Example conftest: pin the hardware for this directory's gates unless the runner says otherwise."""

import os

os.environ.setdefault("SPECBOUND_HW", "a6000x2")
