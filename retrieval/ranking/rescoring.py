"""Dense re-scoring of a first stage's candidates, with an embedding cache keyed by text.

Re-scoring encodes only what the first stage returns (for an article hit: each of its chunks, the
article taking its best cosine), and every vector is kept on disk by the hash of its text, so a
question about an article seen before costs one query encoding; ``wetqa index --rescore MODEL
--precompute`` fills the cache for the whole corpus at build time. The fused score is
``(1 - weight) * first + weight * dense``, each min-max normalised over the candidates.
"""

from __future__ import annotations

from collections.abc import Sequence
from concurrent.futures import Future

import numpy as np

from .._base import RESCORE_DEPTH, RESCORE_WEIGHT, Hit, RetrievalError, check_depth, minmax
from ..dutch import lead_overlap, question_terms
from ..engines.tokenization import DutchAnalyzer
from ..models.encoders import Encoder
from ..models.vectors import EmbeddingCache, best_cosines
from ..scope import Scope
from .stage import Stage

# Passages encoded per model call when a question's candidates are re-scored: between two calls the
# model serves other requests' questions, so one question with many new passages delays them by one
# call, not by all of its passages (a call of 8 mE5-small passages: about 0.3 s on 2 CPU cores).
ENCODE_SLICE = 8


def _below(hits: Sequence[Hit], above: Sequence[Hit], name: str) -> list[Hit]:
    """First-stage hits placed after the re-scored ones: their order kept, each scored 1 below the one before."""
    floor = above[-1].score if above else 0.0
    return [
        Hit(
            h.chunk,
            floor - i,
            len(above) + i,
            name,
            h.article_chunks,
            h.article_paragraphs,
            {**h.features, "first": h.score, "first_rank": h.rank},
        )
        for i, h in enumerate(hits, 1)
    ]


class DenseRescoreStage(Stage):
    """The first ``depth`` hits re-scored by fusing in a dense model's cosine (``--rescore MODEL`` over a
    retriever that is not an articles index, whose ranking has its own model): ``(1 - weight) * first +
    weight * dense``, plus ``clause_weight`` times the announcing clause's overlap."""

    kind = "rescore"
    fitted = True  # its weights were chosen by cross-validation (bench/cross_validate.py, the old default)

    def __init__(
        self,
        encoder: Encoder,
        cache: EmbeddingCache,
        weight: float = RESCORE_WEIGHT,
        depth: int = RESCORE_DEPTH,
        clause_weight: float = 0.0,
        analyzer=None,
    ):
        if not 0 <= weight <= 1:
            raise RetrievalError(f"the dense weight must be between 0 and 1, got {weight}")
        if not 0 <= clause_weight <= 1:
            raise RetrievalError(f"the announcing clause's weight must be between 0 and 1, got {clause_weight}")
        self.encoder, self.cache = encoder, cache
        self.weight, self.depth, self.clause_weight = weight, check_depth(depth), clause_weight
        self._tokens = (analyzer or DutchAnalyzer()).tokens
        self.name = "dense-rescore"

    def begin(self, rankings: list) -> Future:
        """The questions' vectors, encoded while the first stage searches (the model serialises its own calls
        and joins concurrent requests' questions into one)."""
        from .stages import beside

        future = beside(self.encoder.encode_queries, [r.question for r in rankings])
        if rankings:
            rankings[0].vectors["dense_future"] = future
        return future

    def run(self, rankings: list, need: int, scope: Scope | None) -> None:
        from .stages import vectors_begun

        if not rankings:
            return
        vectors = vectors_begun(rankings, "dense", self.encoder.encode_queries)
        for r, v in zip(rankings, vectors):
            r.vectors["dense"] = v
            r.hits = self.ranked(r.question, r.hits, v, max(need, len(r.hits)))

    def ranked(self, query: str, hits: list[Hit], query_vector: np.ndarray, k: int) -> list[Hit]:
        """The first stage's top ``depth`` hits re-scored, whatever ``k``: a question costs at most ``depth``
        articles' passages. Beyond the depth (k > depth), hits follow in the first stage's order."""
        top = self._rescore(query, hits[: self.depth], query_vector, k)
        return top + _below(hits[self.depth : k], top, self.name)

    def _rescore(self, query: str, hits: list[Hit], query_vector: np.ndarray, k: int) -> list[Hit]:
        if not hits:
            return []
        groups = [[c.indexed_text for c in (h.article_chunks or (h.chunk,))] for h in hits]
        dense = best_cosines(self.cache, self.encoder, groups, query_vector, slice_size=ENCODE_SLICE)[0]
        first = np.asarray([h.score for h in hits], dtype=np.float32)
        fused = (1 - self.weight) * minmax(first) + self.weight * minmax(dense)
        clause = np.zeros(len(hits), dtype=np.float32)
        if self.clause_weight:
            terms = question_terms(query, self._tokens)
            clause[:] = [lead_overlap(terms, h.article_paragraphs, self._tokens) for h in hits]
            fused = fused + self.clause_weight * clause
        order = sorted(range(len(hits)), key=lambda i: (-fused[i], i))[:k]
        return [
            Hit(
                hits[i].chunk,
                float(fused[i]),
                r,
                self.name,
                hits[i].article_chunks,
                hits[i].article_paragraphs,
                {
                    **hits[i].features,
                    "first": hits[i].score,
                    "first_rank": hits[i].rank,
                    "dense": float(dense[i]),
                    "clause": float(clause[i]),
                },
            )
            for r, i in enumerate(order, 1)
        ]
