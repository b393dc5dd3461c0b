"""``python -m wetqa.corpus build ...`` is ``wetqa corpus build ...``."""

import sys

from wetqa.cli import run

run(["corpus", *sys.argv[1:]])
