"""``python -m wetqa.corpus build ...`` is ``wetqa corpus build ...``."""

import sys

from wetqa.cli import main

sys.exit(main(["corpus", *sys.argv[1:]]))
