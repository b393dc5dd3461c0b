"""Pipeline keys: which fitted models (``ranking.json``, ``confidence.json``) a pipeline reads.

``articles+dense+questions+reader@whole``: the engine, the signals it has, the reader, the scale of its corpus.
"""

from __future__ import annotations


def with_context(key: str) -> str:
    """The key of the model that ranks a conversation's follow-up in a pipeline of ``key``."""
    base, at, scale = key.partition("@")
    reader = base.endswith("+reader")
    base = base.removesuffix("+reader")
    return f"{base}+context" + ("+reader" if reader else "") + (f"@{scale}" if at else "")


def with_reader(key: str) -> str:
    """The key of the same pipeline with a reader."""
    base, _, scale = key.partition("@")
    return f"{base}+reader" + (f"@{scale}" if scale else "")
