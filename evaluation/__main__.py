"""``python -m wetqa.evaluation retrieval ...`` is ``wetqa eval retrieval ...``."""

import sys

from wetqa.cli import run

run(["eval", *sys.argv[1:]])
