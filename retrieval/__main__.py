"""``python -m retrieval index ...`` / ``python -m retrieval search ...``."""

import sys

from wetqa.cli import main

sys.exit(main(sys.argv[1:]))
