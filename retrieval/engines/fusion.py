"""Hybrid retrieval: fuse the rankings of two or more retrievers (re-rankers are stages of their own)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from .._base import Hit, RetrievalError, Retriever, RetrieverBase, check_k, minmax, search_in
from ..scope import Scope


def _fused(hit: Hit, score: float, rank: int, retriever: str, article: Hit | None = None) -> Hit:
    """A fused hit: its fused score and rank, and the article it stands for (its chunks and paragraphs, which
    the extractive answer quotes) from ``article``, a ranking's hit of it that carries them (an articles
    index's, whichever index came first). Its features stay with their ranking: they were that retriever's
    evidence, not the fusion's."""
    source = article or hit
    return Hit(hit.chunk, score, rank, retriever, source.article_chunks, source.article_paragraphs)


def _first_hits(rankings: Sequence[Sequence[Hit]]) -> tuple[dict[str, Hit], dict[str, Hit]]:
    """Each hit id's first hit over the rankings, and its first hit that carries its article."""
    first: dict[str, Hit] = {}
    article: dict[str, Hit] = {}
    for ranking in rankings:
        for hit in ranking:
            first.setdefault(hit.id, hit)
            if hit.article_paragraphs:
                article.setdefault(hit.id, hit)
    return first, article


def rrf(rankings: Sequence[Sequence[Hit]], k: int = 10, rrf_k: int = 60) -> list[Hit]:
    """Reciprocal rank fusion: score(d) = sum over rankings of 1 / (rrf_k + rank)."""
    scores: dict[str, float] = {}
    for ranking in rankings:
        for hit in ranking:
            scores[hit.id] = scores.get(hit.id, 0.0) + 1.0 / (rrf_k + hit.rank)
    first, article = _first_hits(rankings)
    order = sorted(scores, key=lambda i: (-scores[i], i))[:k]
    return [_fused(first[i], scores[i], r, "hybrid-rrf", article.get(i)) for r, i in enumerate(order, 1)]


def _minmax(hits: Sequence[Hit]) -> dict[str, float]:
    """Each hit's score min-max scaled (:func:`~wetqa.retrieval._base.minmax`), by hit id."""
    scaled = minmax(np.array([h.score for h in hits], dtype=np.float64))
    return {h.id: float(v) for h, v in zip(hits, scaled)}


def interpolate(rankings: Sequence[Sequence[Hit]], weights: Sequence[float], k: int = 10) -> list[Hit]:
    """Weighted sum of min-max normalised scores; a document missing from a ranking scores 0 there."""
    if len(weights) != len(rankings):
        raise RetrievalError(f"{len(weights)} weights for {len(rankings)} retrievers")
    scores: dict[str, float] = {}
    for ranking, w in zip(rankings, weights):
        for doc, s in _minmax(ranking).items():
            scores[doc] = scores.get(doc, 0.0) + w * s
    first, article = _first_hits(rankings)
    order = sorted(scores, key=lambda i: (-scores[i], i))[:k]
    return [_fused(first[i], scores[i], r, "hybrid-interpolate", article.get(i)) for r, i in enumerate(order, 1)]


class HybridRetriever(RetrieverBase):
    """Fuse any two or more retrievers; each contributes its top ``depth`` hits."""

    def __init__(
        self,
        retrievers: Sequence[Retriever],
        method: str = "rrf",
        weights: Sequence[float] | None = None,
        depth: int = 100,
        rrf_k: int = 60,
    ):
        if len(retrievers) < 2:
            raise RetrievalError("a hybrid retriever needs at least two retrievers")
        if method not in ("rrf", "interpolate"):
            raise RetrievalError(f"unknown fusion {method!r}; use rrf or interpolate")
        if weights is not None and len(weights) != len(retrievers):
            raise RetrievalError(f"{len(weights)} weights for {len(retrievers)} retrievers")
        self.retrievers = list(retrievers)
        self.method = method
        self.weights = list(weights) if weights else [1.0 / len(retrievers)] * len(retrievers)
        self.depth = depth
        self.rrf_k = rrf_k
        self.name = "hybrid(" + "+".join(r.name for r in retrievers) + f";{method})"
        self.chunks = self.retrievers[0].chunks  # hits are cited from the first index's store
        self.laws = self.retrievers[0].laws
        self.calls_model = any(r.calls_model for r in self.retrievers)
        self.inline = all(r.inline for r in self.retrievers)

    def _fuse(self, rankings: Sequence[Sequence[Hit]], k: int) -> list[Hit]:
        if self.method == "rrf":
            return rrf(rankings, k, self.rrf_k)
        return interpolate(rankings, self.weights, k)

    def batch_search(
        self, queries: Sequence[str], k: int = 10, threads: int = 1, scope: Scope | None = None
    ) -> list[list[Hit]]:
        check_k(k)
        per_retriever = [search_in(r, queries, max(k, self.depth), threads, scope) for r in self.retrievers]
        return [self._fuse([rs[i] for rs in per_retriever], k) for i in range(len(queries))]

    def search(self, query: str, k: int = 10, scope: Scope | None = None) -> list[Hit]:
        return self.batch_search([query], k, scope=scope)[0]
