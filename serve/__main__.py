"""``python -m wetqa.serve --index DIR`` is ``wetqa serve --index DIR``."""

import sys

from wetqa.cli import main

sys.exit(main(["serve", *sys.argv[1:]]))
