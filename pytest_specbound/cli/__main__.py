"""``python -m pytest_specbound.cli``."""

import sys

from pytest_specbound.cli import main

sys.exit(main())
