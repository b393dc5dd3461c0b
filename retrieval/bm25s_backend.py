"""BM25 without Java: bm25s with the Lucene-compatible Dutch analyzer."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

from wetqa.corpus.records import Chunk
from wetqa.settings import setting

from ._base import Hit, RetrievalError, check_k, check_query
from .registry import RetrieverInfo, register
from .selection import ImpactIndex, top_k_dense
from .tokenization import DutchAnalyzer


# Pyserini's defaults, so both BM25 backends score alike.
@dataclass(frozen=True, slots=True)
class BM25sOptions:
    k1: float = setting(0.9, "BM25: term-frequency saturation", minimum=0)
    b: float = setting(0.4, "BM25: length normalisation", minimum=0, maximum=1)
    stemmer: str = setting("dutch_porter", "Snowball stemmer of the analyzer (PyStemmer name)")


DEFAULT_OPTIONS = asdict(BM25sOptions())


class BM25sRetriever:
    name = "bm25s"

    def __init__(self, model, chunks: list[Chunk], analyzer: DutchAnalyzer):
        self._model = model
        self._impacts = ImpactIndex.from_bm25s(model)
        self.chunks = chunks
        self.analyzer = analyzer

    @staticmethod
    def build(chunks: Sequence[Chunk], out: Path, options: dict, progress: bool = True) -> None:
        import bm25s

        analyzer = DutchAnalyzer(options["stemmer"])
        tokens = [analyzer.tokens(c.indexed_text) for c in chunks]
        if not any(tokens):
            raise RetrievalError(
                "the corpus has no indexable words (every chunk is empty or stop words): nothing to search"
            )
        model = bm25s.BM25(k1=options["k1"], b=options["b"], method="lucene")
        model.index(tokens, show_progress=progress)
        model.save(str(out / "bm25s"))

    @classmethod
    def load(cls, path: Path, meta: dict, chunks: list[Chunk]) -> BM25sRetriever:
        import bm25s

        model = bm25s.BM25.load(str(path / "bm25s"), mmap=False)
        return cls(model, chunks, DutchAnalyzer(meta["options"]["stemmer"]))

    def _query_ids(self, query: str) -> list[int]:
        vocab = self._model.vocab_dict
        return [vocab[t] for t in self.analyzer.tokens(query) if t in vocab]

    def _top(self, ids: list[int], k: int) -> list[Hit]:
        # Rank only the documents that contain a query term: numpy's argpartition over
        # the whole, mostly-zero score array (what bm25s.retrieve does) costs far more.
        docs, scores = top_k_dense(self._impacts, ids, k)
        return [Hit(self.chunks[int(d)], float(s), r, self.name) for r, (d, s) in enumerate(zip(docs, scores), 1)]

    def batch_search(self, queries: Sequence[str], k: int = 10, threads: int = 1) -> list[list[Hit]]:
        check_k(k)
        ids = [self._query_ids(check_query(q)) for q in queries]
        k = min(k, len(self.chunks))

        def one(q: list[int]) -> list[Hit]:
            return self._top(q, k) if q else []  # a query with no known term matches nothing

        if threads > 1 and len(ids) > 1:
            from concurrent.futures import ThreadPoolExecutor

            with ThreadPoolExecutor(threads) as pool:
                return list(pool.map(one, ids))
        return [one(q) for q in ids]

    def search(self, query: str, k: int = 10) -> list[Hit]:
        return self.batch_search([query], k)[0]


register(
    RetrieverInfo(
        name="bm25s",
        cls=BM25sRetriever,
        options=BM25sOptions,
        description="BM25 over chunks without Java (bm25s with Lucene's Dutch analyzer)",
        inline=True,
    )
)
