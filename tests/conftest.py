"""The test session probes the CPU into a cache of its own (``SPECBOUND_CACHE_DIR``, inherited
by the pytester and server subprocesses): no test reads a figure some earlier run left on the
machine. The folder is removed when the session ends."""

import atexit
import os
import shutil
import tempfile

_CACHE = tempfile.mkdtemp(prefix="specbound-test-cache-")
os.environ["SPECBOUND_CACHE_DIR"] = _CACHE
atexit.register(shutil.rmtree, _CACHE, True)
