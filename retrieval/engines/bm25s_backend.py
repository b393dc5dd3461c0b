"""BM25 without Java over chunks: impacts as bm25s computes them (:mod:`.impacts`), Lucene's Dutch analyzer."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

from wetqa.corpus.records import Chunk
from wetqa.settings import setting

from .._base import Hit, RetrievalError, RetrieverBase, check_k, check_query
from ..kernels.impacts import ImpactBuilder, Vocabulary, load_view
from ..kernels.selection import ImpactIndex, top_k_dense
from ..registry import RetrieverInfo, register
from ..scope import ChunkScope, Scope
from .store import ChunkStore
from .tokenization import DutchAnalyzer

VIEW = "bm25s"


# Pyserini's defaults, so both BM25 backends score alike.
@dataclass(frozen=True, slots=True)
class BM25sOptions:
    k1: float = setting(0.9, "BM25: term-frequency saturation", minimum=0)
    b: float = setting(0.4, "BM25: length normalisation", minimum=0, maximum=1)
    stemmer: str = setting("dutch_porter", "Snowball stemmer of the analyzer (PyStemmer name)")


DEFAULT_OPTIONS = asdict(BM25sOptions())


class BM25sBuilder:
    def __init__(self, out: Path, options: dict, vocab: Vocabulary, progress: bool = True):
        self.vocab = vocab
        self.analyzer = DutchAnalyzer(options["stemmer"])
        self.view = ImpactBuilder(out, VIEW, options["k1"], options["b"])
        self.tokens = 0

    def add(self, article: dict, article_row: int, chunks: Sequence[Chunk], rows: range) -> None:
        for c in chunks:
            ids = self.vocab.ids_of(self.analyzer.tokens(c.indexed_text))
            self.tokens += len(ids)
            self.view.add(ids)

    def finish(self) -> None:
        if not self.tokens:
            raise RetrievalError(
                "the corpus has no indexable words (every chunk is empty or stop words): nothing to search"
            )
        self.view.finish(len(self.vocab))


class BM25sRetriever(RetrieverBase):
    name = "bm25s"
    inline = True

    @property
    def laws(self):
        return self.scoped.laws  # the law table its chunks are masked by

    def __init__(
        self, impacts: ImpactIndex, store: ChunkStore, analyzer: DutchAnalyzer, scoped: ChunkScope | None = None
    ):
        self._impacts = impacts
        self.chunks = store
        self.analyzer = analyzer
        self.scoped = scoped or ChunkScope(None, None)

    @staticmethod
    def builder(out: Path, options: dict, vocab: Vocabulary, progress: bool = True) -> BM25sBuilder:
        return BM25sBuilder(out, options, vocab, progress)

    @classmethod
    def load(cls, path: Path, meta: dict, store: ChunkStore) -> BM25sRetriever:
        scoped = ChunkScope.load(path, len(store))
        return cls(load_view(path, VIEW), store, DutchAnalyzer(meta["options"]["stemmer"]), scoped)

    def _query_ids(self, query: str) -> list[int]:
        tokens = self.analyzer.tokens(query)
        ids = self.chunks.term_ids(tokens)
        return [ids[t] for t in tokens if t in ids]

    def _top(self, ids: list[int], k: int, allowed=None) -> list[Hit]:
        # Rank only the documents that contain a query term: numpy's argpartition over
        # the whole, mostly-zero score array (what bm25s.retrieve does) costs far more.
        docs, scores = top_k_dense(self._impacts, ids, k, allowed)
        chunks = self.chunks.rows(docs)
        return [Hit(c, float(s), r, self.name) for r, (c, s) in enumerate(zip(chunks, scores), 1)]

    def batch_search(
        self, queries: Sequence[str], k: int = 10, threads: int = 1, scope: Scope | None = None
    ) -> list[list[Hit]]:
        check_k(k)
        checked = [check_query(q) for q in queries]
        work = [(self._query_ids(q), self.scoped.allowed(scope, q)) for q in checked]
        k = min(k, len(self.chunks))

        def one(item) -> list[Hit]:
            ids, allowed = item
            return self._top(ids, k, allowed) if ids else []  # a query with no known term matches nothing

        if threads > 1 and len(work) > 1:
            from concurrent.futures import ThreadPoolExecutor

            with ThreadPoolExecutor(threads) as pool:
                return list(pool.map(one, work))
        return [one(x) for x in work]

    def search(self, query: str, k: int = 10, scope: Scope | None = None) -> list[Hit]:
        return self.batch_search([query], k, scope=scope)[0]


register(
    RetrieverInfo(
        name="bm25s",
        cls=BM25sRetriever,
        options=BM25sOptions,
        description="BM25 over chunks without Java (bm25s with Lucene's Dutch analyzer)",
        inline=BM25sRetriever.inline,
    )
)
