"""Root conftest: the plugin's own tests drive pytest through ``pytester``.

The test session probes the CPU into a cache of its own (``SPECBOUND_CACHE_DIR``, inherited by
the pytester subprocesses): no test reads a figure some earlier run left on the machine.
"""

import os
import tempfile

os.environ["SPECBOUND_CACHE_DIR"] = tempfile.mkdtemp(prefix="specbound-test-cache-")

pytest_plugins = ["pytester"]
