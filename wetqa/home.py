"""Where wetqa keeps its data when no path is given: ``$WETQA_HOME``, default ``./data``.

The main job (``scripts/demo.sh``) builds ``$WETQA_HOME/corpus`` and the default index
``$WETQA_HOME/index``, so that ``wetqa ask "..."`` works without ``--index``.
"""

from __future__ import annotations

import os
from pathlib import Path


def data_home() -> Path:
    return Path(os.environ.get("WETQA_HOME") or "data")


def default_corpus() -> Path:
    return data_home() / "corpus"


def default_index() -> Path:
    return data_home() / "index"


def cache_root() -> Path:
    """Caches that can be rebuilt (converted models, passage embeddings): ``$WETQA_CACHE`` or ``~/.cache/wetqa``."""
    if os.environ.get("WETQA_CACHE"):
        return Path(os.environ["WETQA_CACHE"])
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "wetqa"
