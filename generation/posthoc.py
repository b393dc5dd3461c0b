"""Post-hoc citing: which sentences of the cited law text support an answer sentence?

The scoring that the server uses to put ``[n]`` markers behind answer
sentences (BM25 over the sentences of the cited chunks), and the interface
that the model-based attributors of :mod:`wetqa.evaluation.attribution`
implement as well. It lives with generation, below serve and evaluation,
because both use it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Protocol

import numpy as np

from wetqa.retrieval.engines.tokenization import DutchAnalyzer, cached_tokens


class AttributionError(ValueError):
    pass


@dataclass(slots=True)
class Attribution:
    scores: list[float]  # one per candidate
    selected: list[int]  # indices of the chosen references


class Attributor(Protocol):
    name: str
    default_threshold: float

    def scores(self, sentence: str, candidates: Sequence[str]) -> list[float]: ...


def select(scores: Sequence[float], threshold: float, max_refs: int | None = None) -> list[int]:
    order = sorted((i for i, s in enumerate(scores) if s >= threshold), key=lambda i: -scores[i])
    return sorted(order[:max_refs] if max_refs else order)


def bm25_matrix(
    queries: Sequence[Sequence[str]], docs: Sequence[Sequence[str]], k1: float = 1.2, b: float = 0.75
) -> list[list[float]]:
    """Lucene BM25 of each query against a small document set (the set is the collection).

    The same formula as bm25s' ``method="lucene"``, without building an index:
    for a handful of candidate sentences per request this is far cheaper.
    """
    return _bm25_rows(queries, [term_freqs(d) for d in docs], [len(d) for d in docs], k1, b)


def term_freqs(tokens: Sequence[str]) -> dict[str, int]:
    tf: dict[str, int] = {}
    for t in tokens:
        tf[t] = tf.get(t, 0) + 1
    return tf


@lru_cache(maxsize=1 << 15)
def _sentence_stats(text: str, stemmer: str) -> tuple[dict[str, int], int]:
    """A candidate sentence's term frequencies and length. Cached: source sentences are law text, static."""
    tokens = cached_tokens(text, stemmer)
    return term_freqs(tokens), len(tokens)


def _bm25_rows(
    queries: Sequence[Sequence[str]], tfs: Sequence[dict[str, int]], lengths: Sequence[int], k1: float, b: float
) -> list[list[float]]:
    n = len(tfs)
    if n == 0:
        return [[] for _ in queries]
    avgdl = sum(lengths) / n or 1.0
    df: dict[str, int] = {}
    for tf in tfs:
        for t in tf:
            df[t] = df.get(t, 0) + 1
    idf = {t: math.log(1 + (n - c + 0.5) / (c + 0.5)) for t, c in df.items()}
    # Term -> [(document, weight)]: each query then touches only the documents that
    # share a term with it instead of looking every term up in every document.
    postings: dict[str, list[tuple[int, float]]] = {}
    for j, (tf, length) in enumerate(zip(tfs, lengths)):
        norm = k1 * (1 - b + b * length / avgdl)
        for t, f in tf.items():
            postings.setdefault(t, []).append((j, idf[t] * f / (f + norm)))
    out = []
    for q in queries:
        row = [0.0] * n
        for t in q:  # a repeated query term counts again, as in Lucene
            for j, w in postings.get(t, ()):
                row[j] += w
        out.append(row)
    return out


class BM25Attributor:
    """BM25 of the answer sentence against the item's candidates, normalised by the best score.

    Normalising by the maximum makes one threshold work across items whose raw
    BM25 scales differ; the best candidate always scores 1 (when any term matches).
    ``backend="bm25s"`` scores with bm25s; ``"python"`` with :func:`bm25_matrix`
    (equal scores, tested; cheaper for the few sentences of one answer).
    """

    name = "bm25"
    default_threshold = 0.5

    def __init__(self, k1: float = 1.2, b: float = 0.75, backend: str = "bm25s"):
        if backend not in ("bm25s", "python"):
            raise AttributionError(f"unknown BM25 backend {backend!r}; use bm25s or python")
        self.k1, self.b, self.backend = k1, b, backend
        self.analyzer = DutchAnalyzer()

    def tokens(self, text: str) -> list[str]:
        return list(cached_tokens(text, self.analyzer.stemmer_name))

    def normalised_matrix(self, sentences: Sequence[str], candidates: Sequence[str]) -> list[list[float]]:
        """Scores of many answer sentences against one candidate set (the fast path)."""
        stemmer = self.analyzer.stemmer_name
        stats = [_sentence_stats(c, stemmer) for c in candidates]
        rows = _bm25_rows(
            [cached_tokens(s, stemmer) for s in sentences],
            [tf for tf, _ in stats],
            [n for _, n in stats],
            self.k1,
            self.b,
        )
        out = []
        for row in rows:
            top = max(row) if row else 0.0
            out.append([x / top if top > 0 else 0.0 for x in row])
        return out

    def raw_scores(self, sentence: str, candidates: Sequence[str]) -> np.ndarray:
        if self.backend == "python":
            return np.asarray(
                bm25_matrix([self.tokens(sentence)], [self.tokens(c) for c in candidates], self.k1, self.b)[0]
                if candidates
                else [],
                dtype=float,
            )
        import bm25s

        if not candidates:
            return np.zeros(0)
        docs = [self.analyzer.tokens(c) for c in candidates]
        query = [t for t in self.analyzer.tokens(sentence)]
        if not query or not any(docs):
            return np.zeros(len(candidates))
        model = bm25s.BM25(k1=self.k1, b=self.b, method="lucene")
        model.index(docs, show_progress=False)  # empty documents are fine and count with length 0
        vocab = model.vocab_dict
        ids = [vocab[t] for t in query if t in vocab]
        if not ids:
            return np.zeros(len(candidates))
        return np.asarray(model.get_scores_from_ids(ids), dtype=float)

    def scores(self, sentence: str, candidates: Sequence[str]) -> list[float]:
        raw = self.raw_scores(sentence, candidates)
        top = float(raw.max()) if raw.size else 0.0
        return [float(s / top) if top > 0 else 0.0 for s in raw]
