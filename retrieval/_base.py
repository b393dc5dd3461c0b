"""Records and the one interface every retriever implements."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

import numpy as np

from wetqa.corpus.records import Chunk
from wetqa.settings import flag_of


class RetrievalError(ValueError):
    """Bad input or a missing/stale index; the message names the problem."""


@dataclass(frozen=True, slots=True)
class Named:
    """A setting a message names: written ``--date`` on the command line, ``date`` in an API request."""

    setting: str


class InvalidSetting(RetrievalError):
    """A setting's value retrieval cannot answer (a kind the index does not hold, a day before every
    version), knowing which setting as data: ``setting`` (its name: ``date``, ``laws``; None when no one
    setting is to blame), as vLLM's ``VLLMValidationError`` carries its ``parameter``.

    The message is made of text and :class:`Named` settings: ``str()`` writes them as flags (the command
    line's message), :meth:`message` as the caller names them (the API: as the client wrote the field).
    """

    def __init__(self, setting: str | None, *parts: str | Named):
        self.setting, self.parts = setting, parts
        super().__init__(self.message(flag_of))

    def message(self, name: Callable[[str], str]) -> str:
        """The message with each setting it names written as ``name(setting)``."""
        return "".join(name(p.setting) if isinstance(p, Named) else p for p in self.parts)

    def __reduce__(self):  # pickled (a process pool's error) with its setting and parts, not its text
        return (type(self), (self.setting, *self.parts))


class DamagedIndex(RetrievalError):
    """An index folder whose files do not hold what they should: one line, with the command that rebuilds it."""

    def __init__(self, folder, what: str):
        super().__init__(f"damaged index {folder}: {what}; rebuild it with `wetqa index --force --out {folder}`")


@dataclass(slots=True)
class Hit:
    chunk: Chunk
    score: float
    rank: int  # 1-based
    retriever: str = ""
    # Article-level retrievers: every chunk of the hit's article, in reading order (the hit's
    # chunk among them), so an answer can quote the passage that answers best.
    article_chunks: tuple[Chunk, ...] = ()
    # ... and the article's paragraphs (lid / top-level al, list items inside), when the index keeps them.
    article_paragraphs: tuple[str, ...] = ()
    # What the retrievers saw of this hit (raw view scores, dense cosine, first-stage rank ...): the
    # signals a confidence estimate and a re-ranker read. Retrievers add to it, never remove.
    features: dict = field(default_factory=dict)

    @property
    def id(self) -> str:
        return self.chunk.id

    def to_json(self) -> dict:
        from wetqa.corpus.sources import citation_url, document_fields

        c = self.chunk
        return {
            "rank": self.rank,
            "score": round(float(self.score), 6),
            "id": c.id,
            "doc_id": c.doc_id,
            **document_fields(c.collection, c.law_id),
            "law": c.law,
            "article": c.article,
            "text": c.text,
            "version_date": c.version_date or None,
            "valid_until": c.valid_until or None,
            "url": citation_url(c.collection, c.law_id, c.article, c.unit, c.version_date),
        }


@dataclass(slots=True)
class Ranking:
    """One question on its way through the stages, and what they concluded."""

    question: str
    hits: list[Hit] = field(default_factory=list)  # best first, each with its evidence (``features``)
    candidates: Any = (
        None  # an articles pipeline's every candidate and feature (:class:`~.articles.candidates.Candidates`)
    )
    confidence: float | None = None  # that the corpus answers the question (None: no model for this pipeline)
    threshold: float | None = None  # below it the fitted pipeline abstains
    signals: dict = field(default_factory=dict)  # what the confidence read
    basis: str = ""  # the pipeline the confidence model was fitted for ("" none)
    snapshot: list[Hit] | None = None  # the hits as the fitted stages left them, when an unfitted stage followed
    vectors: dict = field(default_factory=dict)  # the question's vectors, by model role ("dense", "reader")
    allowed: Any = None  # the articles in the question's scope (a mask over the index's articles)
    # The conversation the question is the last message of (:class:`~.conversation.Context`): what came before,
    # read beside it; None for a single question (or one that changed the subject).
    context: Any = None
    # A stage read the context (an articles pipeline's candidates); others search the last message alone, and
    # only the prompt reads the context then.
    context_read: bool = False

    def to_json(self) -> dict:
        return {
            "question": self.question,
            "hits": [h.to_json() for h in self.hits],
            "confidence": None if self.confidence is None else round(float(self.confidence), 6),
            "basis": self.basis or None,
        }


@runtime_checkable
class Retriever(Protocol):
    """Search chunks. ``batch_search`` returns one list per query, in order."""

    name: str

    # What it declares (:class:`RetrieverBase` gives the defaults and says what each is for).
    # (read-only: an attribute or a property satisfies each)
    @property
    def chunks(self) -> Any: ...
    @property
    def retrievers(self) -> Sequence[Any]: ...
    @property
    def laws(self) -> Any: ...
    @property
    def calls_model(self) -> bool: ...
    @property
    def features(self) -> Any: ...
    @property
    def scope(self) -> Any: ...
    @property
    def inline(self) -> bool: ...

    def warm(self) -> None: ...

    def search(self, query: str, k: int = 10, scope=None) -> list[Hit]: ...

    def batch_search(self, queries: Sequence[str], k: int = 10, threads: int = 1, scope=None) -> list[list[Hit]]:
        """``scope`` (a :class:`~.scope.Scope`, None: the default) says which regulations are ranked."""
        ...


class RetrieverBase:
    """What every retriever of wetqa declares: the scope, the server, the pipeline and the citing stage read these,
    never probe for them (a retriever of one's own subclasses this, or declares the same)."""

    name: str = ""
    # The chunk store behind its hits (an index's own; a hybrid's and a pipeline's first index's).
    chunks: Any = None
    # Its components (a hybrid's retrievers, a pipeline's indexes): warmed with it.
    retrievers: Sequence[Any] = ()
    # The law table a scope masks by (an index that keeps one; a pipeline's first index's), or None.
    laws: Any = None
    # It encodes questions with a model (a dense index): a server then searches in a worker thread.
    calls_model: bool = False
    # An articles pipeline's candidate features (its law names read a conversation), and the pipeline's own
    # scope (--date, --kind ...): None for others.
    features: Any = None
    scope: Any = None

    # Cheap enough for a server's event loop (numpy, a millisecond); its registry entry says the same.
    inline: bool = False

    def warm(self) -> None:
        """What a long-lived process prepares before its first questions (compiled search kernels)."""
        for each in self.retrievers:
            each.warm()


DECLARED = ("name", "chunks", "retrievers", "laws", "calls_model", "features", "scope", "inline", "warm")


def check_retriever(retriever) -> None:
    """A retriever declares what the pipeline reads (:class:`RetrieverBase`): one line naming what it does not,
    where it is handed to a pipeline (it is never probed for it afterwards)."""
    missing = [name for name in DECLARED if not hasattr(retriever, name)]
    if missing:
        raise TypeError(
            f"the retriever {type(retriever).__name__} does not declare {', '.join(missing)}: subclass "
            "wetqa.retrieval.RetrieverBase (its defaults) or declare them"
        )


def search_in(retriever, queries: Sequence[str], k: int, threads: int = 1, scope=None) -> list[list[Hit]]:
    """``retriever.batch_search`` in a scope; without one, called as a retriever of any kind takes it
    (a registered retriever written before scopes existed has no ``scope`` parameter)."""
    if scope is None:
        return retriever.batch_search(queries, k, threads)
    return retriever.batch_search(queries, k, threads, scope=scope)


def warm_up(retriever) -> None:
    """Prepare what a long-lived process should not pay for on its first questions (compiled search kernels):
    the retriever and its components (:meth:`RetrieverBase.warm`)."""
    retriever.warm()


def check_query(query: str) -> str:
    if not isinstance(query, str) or not query.strip():
        raise RetrievalError("empty query: give a question to search for")
    return query.strip()


# The most hits any search returns, and the most first-stage hits one question re-scores or re-ranks
# with a model. A question costs at most this much, whatever a client asks for: encoding the passages
# of 100 articles takes seconds of CPU, and one client asking for k 100000 must not take the server.
MAX_K = 100
MAX_RESCORE_DEPTH = 100

# Chosen by 5-fold cross-validation on the dev questions (bench/cross_validate.py): the dense share of the
# re-scored score, and the hits re-scored.
RESCORE_WEIGHT = 0.7
RESCORE_DEPTH = 30
# The weight of the announcing clause's overlap with the question (retrieval/structure.py): the best MRR
# on the dev questions with the view weights above (bench/cross_validate.py; folds chose 0.2 or 0.3).
RESCORE_CLAUSE_WEIGHT = 0.3
K_RANGE = f"k must be a positive number of hits, at most {MAX_K} (MAX_K: the most wetqa returns)"
DEPTH_RANGE = (
    f"hits re-scored or re-ranked must be at least 1 and at most {MAX_RESCORE_DEPTH} "
    "(MAX_RESCORE_DEPTH: the most one question sends through a model)"
)


def check_k(k: int) -> int:
    if not isinstance(k, int) or isinstance(k, bool) or not 1 <= k <= MAX_K:
        raise RetrievalError(f"{K_RANGE}, got {k!r}")
    return k


def check_depth(depth: int) -> int:
    if not isinstance(depth, int) or isinstance(depth, bool) or not 1 <= depth <= MAX_RESCORE_DEPTH:
        raise RetrievalError(f"{DEPTH_RANGE}, got {depth!r}")
    return depth


def chunks_of(retriever) -> list[Chunk]:
    """The chunk store behind any retriever (it declares it: :attr:`RetrieverBase.chunks`)."""
    if retriever.chunks is None:
        raise RetrievalError(f"the retriever {retriever.name!r} declares no chunks behind its hits")
    return retriever.chunks


def minmax(x: np.ndarray) -> np.ndarray:
    """Scores scaled to [0, 1] (all 1 when they are equal): the one min-max of the ranking's features,
    the reader's cosines, re-scoring and fusion."""
    x = np.asarray(x)
    if not np.issubdtype(x.dtype, np.floating):
        x = x.astype(np.float64)
    if not len(x):
        return x
    lo, hi = float(x.min()), float(x.max())
    return (x - lo) / (hi - lo) if hi > lo else np.ones_like(x)
