"""BM25 without Java: bm25s with the Lucene-compatible Dutch analyzer."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path


from corpus.records import Chunk

from ._base import Hit, check_k, check_query
from .tokenization import DutchAnalyzer

# Pyserini's defaults, so both BM25 backends score alike.
DEFAULT_OPTIONS = {"k1": 0.9, "b": 0.4, "stemmer": "dutch_porter"}


class BM25sRetriever:
    name = "bm25s"

    def __init__(self, model, chunks: list[Chunk], analyzer: DutchAnalyzer):
        self._model = model
        self.chunks = chunks
        self.analyzer = analyzer

    @staticmethod
    def build(chunks: Sequence[Chunk], out: Path, options: dict, progress: bool = True) -> None:
        import bm25s

        analyzer = DutchAnalyzer(options["stemmer"])
        tokens = [analyzer.tokens(c.indexed_text) for c in chunks]
        model = bm25s.BM25(k1=options["k1"], b=options["b"], method="lucene")
        model.index(tokens, show_progress=progress)
        model.save(str(out / "bm25s"))

    @classmethod
    def load(cls, path: Path, meta: dict, chunks: list[Chunk]) -> "BM25sRetriever":
        import bm25s

        model = bm25s.BM25.load(str(path / "bm25s"), mmap=False)
        return cls(model, chunks, DutchAnalyzer(meta["options"]["stemmer"]))

    def _query_ids(self, query: str) -> list[int]:
        vocab = self._model.vocab_dict
        return [vocab[t] for t in self.analyzer.tokens(query) if t in vocab]

    def batch_search(self, queries: Sequence[str], k: int = 10, threads: int = 1) -> list[list[Hit]]:
        check_k(k)
        ids = [self._query_ids(check_query(q)) for q in queries]
        results: list[list[Hit]] = [[] for _ in queries]
        todo = [i for i, q in enumerate(ids) if q]  # a query with no known term matches nothing
        if not todo:
            return results
        k_eff = min(k, len(self.chunks))
        docs, scores = self._model.retrieve(
            [ids[i] for i in todo], k=k_eff, show_progress=False, n_threads=threads if threads > 1 else 0
        )
        for row, i in enumerate(todo):
            hits = []
            for d, s in zip(docs[row], scores[row]):
                if s <= 0:
                    break  # bm25s pads with zero-score documents that contain no query term
                hits.append(Hit(self.chunks[int(d)], float(s), len(hits) + 1, self.name))
            results[i] = hits
        return results

    def search(self, query: str, k: int = 10) -> list[Hit]:
        return self.batch_search([query], k)[0]


