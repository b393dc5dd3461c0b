"""``python -m wetqa.retrieval index ...`` / ``python -m wetqa.retrieval search ...``."""

import sys

from wetqa.cli import main

sys.exit(main(sys.argv[1:]))
