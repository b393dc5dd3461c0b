"""Retrieval as one ordered list of stages that meet at one record, :class:`Ranking`.

    candidates -> features -> learned scorer -> reader -> learned scorer -> re-rankers -> confidence

:func:`assemble` turns a :class:`~.spec.RetrievalSpec` into a :class:`RetrievalPipeline`, here and nowhere
else: ``ask``, ``search``, ``generate``, ``serve``, ``experiment`` and the benches all rank through it, so a
stage one of them has, all of them have. Every stage is a registered part (:mod:`.ranking.stages`,
:mod:`.articles.reader`, :mod:`.ranking.rerankers`) that takes a batch of rankings and moves them on; the
confidence is the last stage and is the model fitted for the stages before it (``ranking/confidence.json``
by pipeline key: ``articles+dense+reader@whole`` ...). A re-ranker that no model was fitted with reorders
the hits after the fitted stages; the confidence then reads the hits as the fitted stages left them, and
says which stages it was fitted for (``Ranking.basis``), so an abstention is never computed from a margin
a re-ranker changed.

A pipeline is also a :class:`~._base.Retriever` (``search``, ``batch_search``), so anything that takes a
retriever takes it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from ._base import Hit, Ranking, RetrievalError, Retriever, RetrieverBase, check_k, check_query
from .ranking.stage import Stage
from .registry import retriever as _retriever_info
from .scope import DEFAULT_SCOPE, Scope

log = logging.getLogger("wetqa.retrieval")


class RetrievalPipeline(RetrieverBase):
    """The stages of one retrieval, run in order over a batch of questions."""

    def __init__(
        self,
        stages: Sequence[Stage],
        *,
        name: str,
        chunks,
        key: str = "",
        features=None,
        scope: Scope | None = None,
        engines: Sequence[Any] = (),
        identity: dict | None = None,
        need: int = 0,
    ):
        self.stages = list(stages)
        self.name = name
        self.chunks = chunks  # the store of the first index (hits, citations and the page read it)
        self.key = key  # the fitted models' key (ranking.json, confidence.json)
        self.features = features  # the articles index's candidate features, when there are candidates
        self.scope = scope or DEFAULT_SCOPE
        self.engines = list(engines)  # the indexes it searches (their kind says whether a server may search inline)
        self.retrievers = self.engines
        self.identity = identity or {}
        self.need = need  # the hits the stages after the first want to see (re-rankers' depth)
        self._hit_stage = next((i for i, s in enumerate(self.stages) if s.needs == "hits"), len(self.stages))
        # Cheap enough for a server's event loop: every engine registered ``inline`` (numpy, a millisecond) and
        # no stage that calls a model (a reader, a re-ranker, dense re-scoring). Model calls run in worker
        # threads, where one request's new passages hold up no other. The stages are fixed once built.
        self.inline = all(e.inline for e in self.engines) and not any(s.calls_model for s in self.stages)

    @property
    def stage_names(self) -> list[str]:
        return [s.name for s in self.stages]

    @property
    def index(self):
        """The first index the pipeline searches."""
        return self.engines[0] if self.engines else None

    @property
    def laws(self):
        """The law table of the first index (what a scope masks by), or None."""
        return self.index.laws if self.index is not None else None

    def rank(
        self,
        questions: Sequence[str],
        k: int = 10,
        threads: int = 1,
        scope: Scope | None = None,
        contexts: Sequence | None = None,
    ) -> list[Ranking]:
        """Each question through every stage; its first ``k`` hits kept. ``contexts``: each question's
        conversation context (:class:`~.conversation.Context`, or None for a question read alone)."""
        from .articles.stages import materialize

        check_k(k)
        rankings = [Ranking(check_query(q)) for q in questions]
        reads = any(s.reads_context for s in self.stages)
        for r, context in zip(rankings, contexts or ()):
            r.context, r.context_read = context, reads and context is not None
        if scope is None and not self.scope.is_default:
            scope = self.scope  # the pipeline's own (--kind, --laws, --jurisdiction, --date); None: the default
        need = max(k, self.need)
        # Work that needs only the questions (a model's question vectors) starts now, beside the first
        # stage: the model and the compiled search both release the GIL, so a question waits for the
        # slower of the two instead of both.
        started = [stage.begin(rankings) for stage in self.stages]
        try:
            self._run(rankings, need, scope, threads)
        except BaseException:
            # Every piece of work begun beside the stages (a stage may begin more than the one it returns: the
            # reader's follow-up vectors) is given up.
            begun = [v for key, v in (rankings[0].vectors.items() if rankings else ()) if key.endswith("_future")]
            for future in [*started, *begun]:
                if future is not None:
                    future.cancel()
            raise
        for r in rankings:
            materialize(r, need, self.features, self.name)
            r.hits = r.hits[:k]
            for rank, h in enumerate(r.hits, 1):
                h.rank = rank
        return rankings

    def _run(self, rankings: list[Ranking], need: int, scope: Scope | None, threads: int = 1) -> None:
        from .articles.stages import materialize
        from .ranking.stages import FusionStage, SearchStage, snapshot

        for i, stage in enumerate(self.stages):
            if i == self._hit_stage:
                for r in rankings:
                    materialize(r, need, self.features, self.name)
            if i >= self._hit_stage and not stage.fitted:
                snapshot(rankings)  # the hits as the fitted stages left them: what the confidence reads
            if threads > 1 and isinstance(stage, (SearchStage, FusionStage)):
                stage.run(rankings, need, scope, threads=threads)  # a batch's questions searched in parallel
            else:
                stage.run(rankings, need, scope)

    def batch_search(
        self, queries: Sequence[str], k: int = 10, threads: int = 1, scope: Scope | None = None
    ) -> list[list[Hit]]:
        return [r.hits for r in self.rank(queries, k, threads, scope)]

    def search(self, query: str, k: int = 10, scope: Scope | None = None) -> list[Hit]:
        return self.batch_search([query], k, scope=scope)[0]

    def warm(self) -> None:
        """What a long-lived process prepares before its first questions (compiled search kernels)."""
        for stage in self.stages:
            stage.warm()

    def describe(self) -> list[dict]:
        """The stages in order: name and kind (``wetqa search --output json`` and the docs show them)."""
        return [{"name": s.name, "kind": s.kind, "fitted": s.fitted} for s in self.stages]


NO_DENSE = "none"  # --rescore none
# Stage kinds that work on hits (a ranking's candidates are turned into hits before the first of them).
HIT_KINDS = ("reranker", "confidence")


def model_digests() -> dict:
    """The SHA-256 (first 16 hex digits) of every fitted model and lexicon a ranking depends on: the learned
    ranking, the confidence, the everyday-to-legal lexicon, the question set and its vectors wetqa ships (a run records them, and a resumed
    run with another is refused)."""
    import hashlib
    from importlib import resources

    from .articles.reader import ARTICLES_PACK, QUESTIONS_PACK
    from .questions import SHIPPED

    files = {
        "ranking": resources.files("wetqa.retrieval.ranking").joinpath("ranking.json"),
        "confidence": resources.files("wetqa.retrieval.ranking").joinpath("confidence.json"),
        "lexicon": resources.files("wetqa.retrieval.rules").joinpath("everyday.tsv"),
        "questions": resources.files("wetqa.retrieval").joinpath(SHIPPED),
        # The written questions' vectors shipped beside them (used only with the reader that made them).
        "questions_reader": resources.files("wetqa.retrieval").joinpath(QUESTIONS_PACK),
        "articles_reader": resources.files("wetqa.retrieval").joinpath(ARTICLES_PACK),
    }
    from .rules import digests as rule_digests

    out = {name: hashlib.sha256(f.read_bytes()).hexdigest()[:16] if f.is_file() else None for name, f in files.items()}
    # Every hand-written rule file too (word lists, law-name tables): a run notices when one changes.
    return out | {"rules": rule_digests()}


def rank(
    retriever,
    questions: Sequence[str],
    k: int,
    threads: int = 1,
    scope: Scope | None = None,
    contexts: Sequence | None = None,
) -> list[Ranking]:
    """Rankings from any retriever: a pipeline's own, or a plain retriever's hits (no confidence; a
    conversation's context is read by an articles pipeline only)."""
    if isinstance(retriever, RetrievalPipeline):
        return retriever.rank(questions, k, threads, scope, contexts)
    from ._base import search_in

    found = search_in(retriever, questions, k, threads, scope)
    # No confidence model for a retriever of one's own: it always answers (confidence 1), as it always did.
    return [Ranking(q, list(h), confidence=1.0 if h else 0.0) for q, h in zip(questions, found)]


# --------------------------------------------------------------------------------------------- assembly
def assemble(spec, complete: Callable[[list[list[dict]]], list[str]] | None = None) -> RetrievalPipeline:
    """The pipeline of a :class:`~.spec.RetrievalSpec`: its indexes opened and its stages in order.

    ``complete`` (prompts -> texts) is the language model a ``listwise`` re-ranker asks; the generation
    stage hands it in (:meth:`wetqa.generation.PipelineSpec.build`), so retrieval imports no generator.
    """
    from .engines.index import load_index, read_index_meta
    from .ranking import stages as st

    spec = spec.validate()
    paths = spec.index_paths
    _check_same_corpus(paths)
    given = spec.rescore if spec.rescore != NO_DENSE else None
    own_pipelines = len(paths) > 1 and not given
    if own_pipelines:
        # Each index of a hybrid ranked by its own default pipeline, then fused (a model given at query time
        # instead re-scores the fused hits).
        engines = [_component(spec, p) for p in paths]
    else:
        engines = [load_index(p, spec.corpus) for p in paths]
    metas = [read_index_meta(p) for p in paths]
    # --rescore none: the index's recorded dense model left out (the ranking without dense signals). A hybrid's
    # indexes use their recorded models in their own pipelines: only a model given re-scores the fused hits.
    recorded = None if own_pipelines else (metas[0].get("rescore") or {}).get("model")
    dense_model = None if spec.rescore == NO_DENSE else given or recorded
    stages: list[Any] = []
    features = None
    key = ""
    reader = _reader_of(spec)
    # An engine with stages of its own (its registration says which: the articles engine's candidates, features,
    # learned models and reader) ranks through them; any other gives its hits as they come.
    own = _retriever_info(engines[0].name).stage_list() if len(engines) == 1 else None
    made = own(spec, engines[0], paths[0], dense_model, reader) if own is not None else None
    if made is not None:
        stages, features, key = made
    else:
        if len(engines) == 1:
            stages.append(st.SearchStage(engines[0]))
        else:
            from .engines.fusion import HybridRetriever

            stages.append(st.FusionStage(HybridRetriever(engines, method=spec.fusion, weights=spec.weights)))
        if dense_model:
            stages.append(_dense_rescore(spec, metas[0], dense_model))
        if reader is not None and not own_pipelines:  # a hybrid's indexes read in their own pipelines
            from .articles.reader import HitReader

            stages.append(HitReader(reader, spec.read_depth_or_default))
    from .ranking.rerankers import make_rerankers

    stages += make_rerankers(spec, complete)
    context = _confidence_context(engines[0], features)
    stages.append(st.ConfidenceStage(context, key))
    need = max([s.depth for s in stages if s.kind in HIT_KINDS or s.kind == "rescore"] + [0])
    return RetrievalPipeline(
        stages,
        name=_name(engines, dense_model, reader is not None, spec),
        chunks=engines[0].chunks,
        key=key,
        features=features,
        scope=spec.scope,
        engines=engines,
        identity=spec.identity(),
        need=need,
    )


def _component(spec, path: Path):
    from dataclasses import replace

    return assemble(replace(spec, index=(str(path),), fusion="rrf", weights=None, rerank=(), rerank_top=20))


def _reader_of(spec):
    """The spec's reader (loaded), None without one; a reader asked for but absent is one line, exit 3."""
    name = spec.reader_model
    if name is None:
        return None
    from .articles.reader import Reader

    return Reader(name, max_tokens=spec.read_tokens_or_default, dim=spec.reader_dim)


def _dense_rescore(spec, meta: dict, model: str):
    from ._base import RESCORE_CLAUSE_WEIGHT, RESCORE_DEPTH, RESCORE_WEIGHT
    from .engines.index import dense_encoder
    from .ranking.rescoring import DenseRescoreStage

    recorded = meta.get("rescore") or {}
    given = spec.rescore not in (None, NO_DENSE)

    def pick(value, name, default):
        if value is not None:
            return value
        return default if given else recorded.get(name, default)

    encoder, cache = dense_encoder(model)
    return DenseRescoreStage(
        encoder,
        cache,
        pick(spec.rescore_weight, "weight", RESCORE_WEIGHT),
        pick(spec.rescore_depth, "depth", RESCORE_DEPTH),
        pick(spec.rescore_clause_weight, "clause_weight", RESCORE_CLAUSE_WEIGHT),
    )


def _confidence_context(index, features):
    from .ranking.confidence import SignalContext

    return SignalContext(index, features.law_names if features is not None else None)


def _check_same_corpus(paths: Sequence[Path]) -> None:
    from .engines.index import read_index_meta

    if len(paths) > 1:
        # Fusing rankings over different corpora would mix chunk ids that mean different texts.
        hashes = {str(p): read_index_meta(p).get("corpus_hash") for p in paths}
        if len(set(hashes.values())) > 1:
            listing = ", ".join(f"{p} ({(h or '?')[:12]})" for p, h in hashes.items())
            raise RetrievalError(
                f"indexes built from different corpora cannot be fused: {listing}; rebuild them from one corpus"
            )


def _name(engines, dense_model: str | None, reader: bool, spec) -> str:
    if len(engines) > 1:
        name = "hybrid(" + "+".join(e.name for e in engines) + f";{spec.fusion})"
    else:
        name = engines[0].name
    if dense_model:
        name += "+dense"
    if reader:
        name += "+reader"
    if spec.rerank:
        name += "+rerank"
    return name


def as_pipeline(retriever: Retriever) -> RetrievalPipeline:
    """Any retriever as a one-stage pipeline (a user's own retriever, handed to a generation pipeline)."""
    from .ranking.confidence import SignalContext
    from .ranking.stages import ConfidenceStage, SearchStage

    if isinstance(retriever, RetrievalPipeline):
        return retriever
    from ._base import chunks_of

    return RetrievalPipeline(
        [SearchStage(retriever), ConfidenceStage(SignalContext(None, None), "")],
        name=retriever.name,
        chunks=chunks_of(retriever),
        engines=[retriever],
    )
