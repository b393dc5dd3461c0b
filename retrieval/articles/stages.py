"""The articles engine's stages, in the order its pipeline runs them (:func:`wetqa.retrieval.articles.stage_list.stages_for`):

- ``candidates``: an articles index's candidates from words and meaning (:class:`~.candidates.CandidateFeatures`);
- ``features``: every candidate's evidence;
- ``learned``: the shipped linear model's score of every candidate (``ranking.json``);
- ``reader`` (:class:`~.reader.ArticleReader`): the reader's cosines of the first candidates, features of the next
  ``learned`` model.

They work on a ranking's :class:`~.candidates.Candidates`; the first stage after them that needs hits turns the best
of them into hits (:func:`materialize`).
"""

from __future__ import annotations

from concurrent.futures import Future
from typing import TYPE_CHECKING

import numpy as np

from .._base import Hit
from ..ranking.stage import Stage
from ..ranking.stages import beside, vectors_begun
from .candidates import CandidateFeatures, RankingModel, ranked_hits

if TYPE_CHECKING:
    from .._base import Ranking
    from ..scope import Scope


def materialize(ranking: Ranking, n: int, features: CandidateFeatures | None, name: str) -> list[Hit]:
    """The ranking's first ``n`` hits, made from its scored candidates when it has those (and fewer hits)."""
    c = ranking.candidates
    if c is not None and features is not None and len(ranking.hits) < min(n, len(c.articles)):
        scores = c.scores if c.scores is not None else np.zeros(len(c.articles))
        ranking.hits = ranked_hits(features, c, scores, n, name)
    return ranking.hits


class ArticleCandidates(Stage):
    """An articles index's candidates: BM25 of the question and of its legal words, the nearest passages,
    the articles of the laws it names or covers by title (:meth:`CandidateFeatures.collect`)."""

    kind = "candidates"
    needs = "question"
    fitted = True
    name = "candidates"
    reads_context = True

    def __init__(self, features: CandidateFeatures, reader=None):
        self.features = features
        self.calls_model = features.dense or reader is not None  # question vectors, the nearest passages
        # The reader finds the laws a question is about when the index keeps its laws read (readers.LawReader).
        self.reader = reader if features.laws_read is not None else None

    def begin(self, rankings: list[Ranking]) -> Future | None:
        if self.reader is None or not rankings:
            return None
        future = beside(self.reader.views, [r.question for r in rankings])
        rankings[0].vectors["reader_future"] = future
        return future

    def run(self, rankings: list[Ranking], need: int, scope: Scope | None) -> None:
        index = self.features.articles
        followed = [r for r in rankings if r.context is not None]
        # A follow-up's earlier questions are encoded in the question's own call (one call, not two).
        both = self.features.query_and_context_vectors(
            [r.question for r in rankings], [r.context.text for r in followed]
        )
        vectors = None if both is None else both[0]
        of_context = dict(zip(map(id, followed), both[1])) if both is not None else {}
        read = vectors_begun(rankings, "reader", self.reader.views) if self.reader is not None else None
        for i, r in enumerate(rankings):
            v = None if vectors is None else vectors[i]
            r.vectors["dense"] = v
            if read is not None:
                r.vectors["reader"] = read[i]  # the question's views (the query view first)
            r.allowed = index.allowed(scope, r.question)
            context = (
                self.features.read_context(r.context, r.allowed, of_context.get(id(r)))
                if r.context is not None
                else None
            )
            r.candidates = self.features.collect(r.question, r.allowed, v, r.vectors.get("reader"), context)

    def warm(self) -> None:
        self.features.articles.warm()
        if self.features.passages is not None:
            self.features.passages.warm()


class ArticleFeatures(Stage):
    """Every candidate's evidence (:meth:`CandidateFeatures.featurize`)."""

    kind = "features"
    needs = "candidates"
    fitted = True
    name = "features"

    def __init__(self, features: CandidateFeatures):
        self.features = features
        self.calls_model = features.dense  # candidates' passages not cached yet are encoded

    def run(self, rankings: list[Ranking], need: int, scope: Scope | None) -> None:
        for r in rankings:
            if r.candidates is not None:
                self.features.featurize(r.candidates, r.allowed, r.vectors.get("dense"))


class LearnedScorer(Stage):
    """The shipped linear model's score of every candidate (``ranking.json``); after a reader, of the
    candidates it read, the others kept below them in their order. A conversation's follow-up (a ranking with
    a context) is scored by the ``+context`` model when one is fitted (``in_context``)."""

    kind = "scorer"
    needs = "candidates"
    fitted = True
    calls_model = False

    def __init__(self, model: RankingModel, key: str, in_context: RankingModel | None = None):
        self.model, self.key, self.in_context = model, key, in_context
        self.name = f"learned[{key}]"

    def run(self, rankings: list[Ranking], need: int, scope: Scope | None) -> None:
        for r in rankings:
            c = r.candidates
            if c is None or not len(c.articles):
                continue
            model = self.in_context if r.context is not None and self.in_context is not None else self.model
            scores = model.score(c)
            read = c.values.get("read_mask")
            if read is not None and c.scores is not None:
                # Only the candidates the reader read are scored by a model that weighs its cosines; the rest
                # follow in the order they had, below every one of them.
                below = float(scores[read > 0].min()) - 1.0 if (read > 0).any() else 0.0
                rank_before = np.argsort(np.argsort(-c.scores, kind="stable"), kind="stable")
                scores = np.where(read > 0, scores, below - rank_before * 1e-3)
            c.scores = scores
