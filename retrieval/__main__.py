"""``python -m wetqa.retrieval index ...`` / ``python -m wetqa.retrieval search ...``."""

import sys

from wetqa.cli import run

run(sys.argv[1:])
