"""``python -m wetqa.serve --index DIR`` is ``wetqa serve --index DIR``."""

import sys

from wetqa.cli import run

run(["serve", *sys.argv[1:]])
