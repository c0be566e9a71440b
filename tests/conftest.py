"""Session-wide test set-up.

The CPU probes go into a cache of this session's own (``SPECBOUND_CACHE_DIR``, inherited by the
pytester and server subprocesses): no test reads a figure some earlier run left on the machine.
The folder is removed when the session ends.

Modules that refuse a second import in one process (numpy 2.4: "cannot load module more than once
per process") are imported here, before any test runs. pytester's in-process runs snapshot
``sys.modules`` and drop whatever an inner run imported, so a module first imported inside one
(numpy through pytest-randomly's plugin, or through the CPU probe) would be imported again by the
next inner run and fail it.
"""

import atexit
import contextlib
import importlib
import os
import shutil
import subprocess
import tempfile

import pytest

# where the suite's time goes, reported at its end (and --suite-times=FILE for bench/suite_time.py)
from tests.suite_time import pytest_addoption  # noqa: F401
from tests.suite_time import pytest_configure as configure_suite_time

_CACHE = tempfile.mkdtemp(prefix="specbound-test-cache-")
os.environ["SPECBOUND_CACHE_DIR"] = _CACHE
atexit.register(shutil.rmtree, _CACHE, True)

for _name in ("numpy",):
    with contextlib.suppress(ImportError):
        importlib.import_module(_name)

# The real-server and fault tests keep the order they are written in (a module's tests share its
# servers and measurements, and a shuffle would launch them again and again, or stop a server
# before the tests that use it); pytest-randomly shuffles the unit and plugin tests after them.
# The seed is printed in the header: rerun a failure with -p randomly --randomly-seed=N.
IN_WRITTEN_ORDER = ("tests/integration/", "tests/faults/")


class WrittenOrder:
    """Notes the order the tests were collected in, before pytest-randomly shuffles it: its
    wrapper runs outside pytest-randomly's (registered later, called first)."""

    def __init__(self) -> None:
        self.index: dict[str, int] = {}

    @pytest.hookimpl(wrapper=True, tryfirst=True)
    def pytest_collection_modifyitems(self, items: list[pytest.Item]):  # type: ignore[no-untyped-def]
        self.index = {item.nodeid: n for n, item in enumerate(items)}
        return (yield)


def pytest_configure(config: pytest.Config) -> None:
    config.pluginmanager.register(WrittenOrder(), "written-order")
    configure_suite_time(config)


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The real-server and fault tests back in their written order, first; run before pytest's
    own grouping of a module's parametrized servers (which then keeps that order within)."""
    order = config.pluginmanager.get_plugin("written-order")
    if not isinstance(order, WrittenOrder):
        return
    kept = [i for i in items if i.nodeid.startswith(IN_WRITTEN_ORDER)]
    kept.sort(key=lambda i: order.index.get(i.nodeid, 0))
    items[:] = kept + [i for i in items if not i.nodeid.startswith(IN_WRITTEN_ORDER)]


# what an inner pytester run reads as its ini: no cache folder, and the budgets' items in the
# order written (pytest-randomly, where installed, would shuffle the inner run too)
PYTESTER_INI = "[pytest]\naddopts = -p no:cacheprovider -p no:randomly\n"


@pytest.fixture(scope="session")
def certificate(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, str]:
    """A self-signed certificate for 127.0.0.1 and localhost: (certificate file, key file)."""
    if not shutil.which("openssl"):
        pytest.skip("needs the openssl command to make a self-signed certificate")
    d = tmp_path_factory.mktemp("tls")
    cert, key = d / "cert.pem", d / "key.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
                    "-subj", "/CN=localhost", "-addext", "subjectAltName=IP:127.0.0.1,DNS:localhost",
                    "-keyout", str(key), "-out", str(cert)], check=True, capture_output=True)
    return str(cert), str(key)
