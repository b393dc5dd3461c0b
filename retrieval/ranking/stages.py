"""The stages a retrieval pipeline is made of (:mod:`wetqa.retrieval.pipeline` assembles them).

Each stage takes the rankings of a batch of questions and moves them on, in place:

- ``search``: the hits of any retriever (bm25s over chunks, Pyserini, dense, an articles index alone);
- ``fusion``: several retrievers' hits fused (RRF or interpolation);
- the articles engine's own (``candidates``, ``features``, ``learned``, ``reader``: :mod:`wetqa.retrieval.articles`);
- ``reader`` over plain hits: they ordered by the reader's cosine (:class:`~wetqa.retrieval.articles.reader.HitReader`);
- re-rankers (``cross-encoder``, ``listwise``; :mod:`.rerankers`) and ``dense-rescore``: the first hits again;
- ``confidence``: how sure the pipeline is that its first hit answers, fitted for the stages before it.

Article stages work on a ranking's candidates (every candidate, every feature); the first stage that needs hits
turns the best of them into hits (:func:`wetqa.retrieval.articles.stages.materialize`).
"""

from __future__ import annotations

import contextvars
import threading
from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TYPE_CHECKING

import numpy as np

from .._base import search_in
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
    # In the caller's context: work a client has left (wetqa.cancel) stops here too.
    return _POOL.submit(contextvars.copy_context().run, fn, *args)


def vectors_begun(rankings: Sequence[Ranking], role: str, encode) -> np.ndarray:
    """The questions' vectors of one model role: begun beside the first stage (:func:`beside`) when they were."""
    future = rankings[0].vectors.pop(f"{role}_future", None) if rankings else None
    if future is not None:
        return future.result()
    return encode([r.question for r in rankings])


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
        from .confidence import model_for_key
        from .keys import with_context

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
