"""``python -m wetqa.evaluation retrieval ...`` is ``wetqa eval retrieval ...``."""

import sys

from wetqa.cli import main

sys.exit(main(["eval", *sys.argv[1:]]))
