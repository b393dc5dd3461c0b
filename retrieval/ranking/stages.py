"""The stages a retrieval pipeline is made of (:mod:`wetqa.retrieval.pipeline` assembles them).

Each stage takes the rankings of a batch of questions and moves them on, in place:

- ``search``: the hits of any retriever (bm25s over chunks, Pyserini, dense, an articles index alone);
- ``fusion``: several retrievers' hits fused (RRF or interpolation);
- ``candidates`` and ``features``: an articles index's candidates from words and meaning, and their evidence
  (:class:`~.candidates.CandidateFeatures`);
- ``learned``: the shipped linear model's score of every candidate (:mod:`.candidates`);
- ``reader``: the reader's cosines of the first candidates (:mod:`.readers`), features of the next ``learned``
  model; over plain hits it orders them by cosine;
- re-rankers (``cross-encoder``, ``listwise``; :mod:`.rerankers`) and ``dense-rescore``: the first hits again;
- ``confidence``: how sure the pipeline is that its first hit answers, fitted for the stages before it.

Article stages work on a ranking's :class:`~.candidates.Candidates` (every candidate, every feature);
the first stage that needs hits turns the best of them into hits (:func:`materialize`).
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TYPE_CHECKING

import numpy as np

from .._base import Hit, search_in
from .candidates import CandidateFeatures, RankingModel, ranked_hits
from .stage import Stage

if TYPE_CHECKING:
    from .._base import Ranking
    from ..scope import Scope


_POOL: ThreadPoolExecutor | None = None
_POOL_LOCK = threading.Lock()


def beside(fn, *args) -> Future:
    """``fn(*args)`` on a thread of its own (one pool per process): a model's question vectors while the first
    stage searches."""
    global _POOL
    with _POOL_LOCK:
        if _POOL is None:
            _POOL = ThreadPoolExecutor(max_workers=8, thread_name_prefix="wetqa-encode")
    return _POOL.submit(fn, *args)


def vectors_begun(rankings: Sequence[Ranking], role: str, encode) -> np.ndarray:
    """The questions' vectors of one model role: begun beside the first stage (:func:`beside`) when they were."""
    future = rankings[0].vectors.pop(f"{role}_future", None) if rankings else None
    if future is not None:
        return future.result()
    return encode([r.question for r in rankings])


def materialize(ranking: Ranking, n: int, features: CandidateFeatures | None, name: str) -> list[Hit]:
    """The ranking's first ``n`` hits, made from its scored candidates when it has those (and fewer hits)."""
    c = ranking.candidates
    if c is not None and features is not None and len(ranking.hits) < min(n, len(c.articles)):
        scores = c.scores if c.scores is not None else np.zeros(len(c.articles))
        ranking.hits = ranked_hits(features, c, scores, n, name)
    return ranking.hits


class SearchStage(Stage):
    """A retriever's own hits (the first stage of a pipeline over bm25s, Pyserini, dense or chunks)."""

    kind = "candidates"
    needs = "question"
    fitted = True
    calls_model = False  # whether its engine may run on a server's event loop is the engine's (registry.inline)

    def __init__(self, retriever):
        self.retriever = retriever
        self.name = retriever.name

    def run(self, rankings: list[Ranking], need: int, scope: Scope | None, threads: int = 1) -> None:
        found = search_in(self.retriever, [r.question for r in rankings], need, threads, scope)
        for r, hits in zip(rankings, found):
            r.hits = list(hits)

    def warm(self) -> None:
        self.retriever.warm()


class FusionStage(Stage):
    """Two or more retrievers' hits fused (``--fusion rrf|interpolate``)."""

    kind = "candidates"
    needs = "question"
    fitted = True

    def __init__(self, hybrid):
        self.hybrid = hybrid
        self.name = hybrid.name
        # A dense engine among those fused encodes its questions with a model.
        self.calls_model = hybrid.calls_model

    def run(self, rankings: list[Ranking], need: int, scope: Scope | None, threads: int = 1) -> None:
        found = self.hybrid.batch_search([r.question for r in rankings], need, threads, scope)
        for r, hits in zip(rankings, found):
            r.hits = list(hits)

    def warm(self) -> None:
        self.hybrid.warm()


class ArticleCandidates(Stage):
    """An articles index's candidates: BM25 of the question and of its legal words, the nearest passages,
    the articles of the laws it names or covers by title (:meth:`CandidateFeatures.collect`)."""

    kind = "candidates"
    needs = "question"
    fitted = True
    name = "candidates"

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
        vectors = self.features.query_vectors([r.question for r in rankings])
        read = vectors_begun(rankings, "reader", self.reader.views) if self.reader is not None else None
        for i, r in enumerate(rankings):
            v = None if vectors is None else vectors[i]
            r.vectors["dense"] = v
            if read is not None:
                r.vectors["reader"] = read[i]  # the question's views (the query view first)
            r.allowed = index.allowed(scope, r.question)
            context = self.features.read_context(r.context, r.allowed) if r.context is not None else None
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


class ConfidenceStage(Stage):
    """How sure the pipeline is that its first hit answers (:mod:`.confidence`): the model fitted for the
    stages before it, reading the hits as those stages left them (a re-ranker no model was fitted with
    reorders after them: :attr:`Ranking.snapshot`)."""

    kind = "confidence"
    needs = "hits"
    fitted = True
    name = "confidence"
    calls_model = False  # it reads the signals the stages before it left

    def __init__(self, context, key: str):
        from .candidates import with_context
        from .confidence import model_for_key

        self.context, self.key = context, key
        # The key of the confidence model fitted on conversations' follow-ups, when one is.
        self.in_context = with_context(key) if key and model_for_key(with_context(key)) is not None else None

    def run(self, rankings: list[Ranking], need: int, scope: Scope | None) -> None:
        from .confidence import estimate

        for r in rankings:
            hits = r.snapshot if r.snapshot is not None else r.hits
            # A follow-up says what it asks with the questions before it ("en als ik 17 ben?"): its words are
            # counted with theirs (a two-word follow-up is not a question too short to answer).
            asked = f"{r.context.text} {r.question}" if r.context is not None else r.question
            key = self.key
            if r.context is not None and self.in_context is not None:
                key = self.in_context  # a follow-up: the model fitted on follow-ups, where there is one
            r.confidence, r.signals, model = estimate(self.context, asked, hits, key)
            r.threshold = model.threshold if model is not None else None
            r.basis = self.key if model is not None else ""


def snapshot(rankings: Sequence[Ranking]) -> None:
    """Keep the hits as the fitted stages left them, before a stage no model was fitted with reorders them."""
    for r in rankings:
        if r.snapshot is None:
            r.snapshot = list(r.hits)
