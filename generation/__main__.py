"""``python -m wetqa.generation ask ...`` / ``python -m wetqa.generation generate ...``."""

import sys

from wetqa.cli import run

run(sys.argv[1:])
