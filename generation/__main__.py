"""``python -m wetqa.generation ask ...`` / ``python -m wetqa.generation generate ...``."""

import sys

from wetqa.cli import main

sys.exit(main(sys.argv[1:]))
