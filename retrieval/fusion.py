"""Hybrid retrieval: fuse the rankings of two or more retrievers, optionally re-rank."""

from __future__ import annotations

from collections.abc import Sequence

from ._base import Hit, RetrievalError, Retriever, check_k, search_in
from .scope import Scope


def rrf(rankings: Sequence[Sequence[Hit]], k: int = 10, rrf_k: int = 60) -> list[Hit]:
    """Reciprocal rank fusion: score(d) = sum over rankings of 1 / (rrf_k + rank)."""
    scores: dict[str, float] = {}
    first: dict[str, Hit] = {}
    for ranking in rankings:
        for hit in ranking:
            scores[hit.id] = scores.get(hit.id, 0.0) + 1.0 / (rrf_k + hit.rank)
            first.setdefault(hit.id, hit)
    order = sorted(scores, key=lambda i: (-scores[i], i))[:k]
    return [Hit(first[i].chunk, scores[i], r, "hybrid-rrf") for r, i in enumerate(order, 1)]


def _minmax(hits: Sequence[Hit]) -> dict[str, float]:
    if not hits:
        return {}
    lo = min(h.score for h in hits)
    hi = max(h.score for h in hits)
    span = hi - lo
    return {h.id: (h.score - lo) / span if span > 0 else 1.0 for h in hits}


def interpolate(rankings: Sequence[Sequence[Hit]], weights: Sequence[float], k: int = 10) -> list[Hit]:
    """Weighted sum of min-max normalised scores; a document missing from a ranking scores 0 there."""
    if len(weights) != len(rankings):
        raise RetrievalError(f"{len(weights)} weights for {len(rankings)} retrievers")
    scores: dict[str, float] = {}
    first: dict[str, Hit] = {}
    for ranking, w in zip(rankings, weights):
        for doc, s in _minmax(ranking).items():
            scores[doc] = scores.get(doc, 0.0) + w * s
        for hit in ranking:
            first.setdefault(hit.id, hit)
    order = sorted(scores, key=lambda i: (-scores[i], i))[:k]
    return [Hit(first[i].chunk, scores[i], r, "hybrid-interpolate") for r, i in enumerate(order, 1)]


class HybridRetriever:
    """Fuse any two or more retrievers; each contributes its top ``depth`` hits."""

    def __init__(
        self,
        retrievers: Sequence[Retriever],
        method: str = "rrf",
        weights: Sequence[float] | None = None,
        depth: int = 100,
        rrf_k: int = 60,
        reranker: CrossEncoderReranker | None = None,
        rerank_top: int = 20,
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
        self.reranker = reranker
        self.rerank_top = rerank_top
        self.name = "hybrid(" + "+".join(r.name for r in retrievers) + f";{method})"

    def _fuse(self, rankings: Sequence[Sequence[Hit]], k: int) -> list[Hit]:
        if self.method == "rrf":
            return rrf(rankings, k, self.rrf_k)
        return interpolate(rankings, self.weights, k)

    def batch_search(
        self, queries: Sequence[str], k: int = 10, threads: int = 1, scope: Scope | None = None
    ) -> list[list[Hit]]:
        check_k(k)
        per_retriever = [search_in(r, queries, max(k, self.depth), threads, scope) for r in self.retrievers]
        depth = max(k, self.rerank_top) if self.reranker else k
        fused = [self._fuse([rs[i] for rs in per_retriever], depth) for i in range(len(queries))]
        if self.reranker:
            fused = [self.reranker.rerank(q, hits, k) for q, hits in zip(queries, fused)]
        return fused

    def search(self, query: str, k: int = 10, scope: Scope | None = None) -> list[Hit]:
        return self.batch_search([query], k, scope=scope)[0]


# Multilingual (Dutch included) and strong; for GPU users. Any Hugging Face id or local folder works.
DEFAULT_RERANKER = "BAAI/bge-reranker-v2-m3"


class CrossEncoderReranker:
    """Re-score the top hits with a cross-encoder (sentence-transformers ``CrossEncoder``).

    An article hit is scored by the best of its chunks, so a long article is not judged by one window.
    """

    def __init__(self, model: str = DEFAULT_RERANKER, batch_size: int = 32, device: str | None = None):
        from sentence_transformers import CrossEncoder

        from wetqa.console import check_model_ref

        from .batching import Batcher

        self.model = CrossEncoder(check_model_ref(model, "re-ranker"), device=device)
        self.batch_size = batch_size
        # One predict at a time (the tokenizer is not thread-safe), over the pairs of every request
        # that arrived meanwhile: one call for 16 concurrent queries instead of 16.
        self.batcher: Batcher[tuple[str, str], float] = Batcher(
            lambda pairs: [float(s) for s in self.model.predict(pairs, batch_size=self.batch_size)], max_items=1024
        )

    def rerank(self, query: str, hits: Sequence[Hit], k: int) -> list[Hit]:
        if not hits:
            return []
        groups = [h.article_chunks or (h.chunk,) for h in hits]
        pairs = [(query, c.text) for g in groups for c in g]
        flat = self.batcher(pairs)
        scores, at = [], 0
        for g in groups:
            scores.append(max(flat[at : at + len(g)]))
            at += len(g)
        order = sorted(range(len(hits)), key=lambda i: (-scores[i], i))[:k]
        return [
            Hit(
                hits[i].chunk,
                scores[i],
                r,
                "rerank",
                hits[i].article_chunks,
                hits[i].article_paragraphs,
                {**hits[i].features, "before_rerank": hits[i].score, "rerank": scores[i]},
            )
            for r, i in enumerate(order, 1)
        ]


class RerankedRetriever:
    """Any retriever followed by cross-encoder re-ranking of its top ``top`` hits."""

    def __init__(self, retriever: Retriever, reranker: CrossEncoderReranker, top: int = 20):
        self.retriever = retriever
        self.reranker = reranker
        self.top = top
        self.name = f"{retriever.name}+rerank"

    def batch_search(
        self, queries: Sequence[str], k: int = 10, threads: int = 1, scope: Scope | None = None
    ) -> list[list[Hit]]:
        check_k(k)
        first = search_in(self.retriever, queries, max(k, self.top), threads, scope)
        return [self.reranker.rerank(q, hits, k) for q, hits in zip(queries, first)]

    def search(self, query: str, k: int = 10, scope: Scope | None = None) -> list[Hit]:
        return self.batch_search([query], k, scope=scope)[0]
