"""``python -m generation ask ...`` / ``python -m generation generate ...``."""

import sys

from wetqa.cli import main

sys.exit(main(sys.argv[1:]))
