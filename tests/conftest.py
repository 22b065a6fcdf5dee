import os
import sys

sys.path.insert(0, os.path.dirname(__file__))

from procs import procs  # noqa: E402,F401  (the fixture, shared by the command-level tests)
from purity import unit_tests_stay_pure  # noqa: E402,F401  (autouse: unit tests stay pure)
