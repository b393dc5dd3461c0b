"""Retrieval pipelines of a first stage and the stages a test puts after it (as `assemble` lines them up)."""

from __future__ import annotations

from wetqa.retrieval.pipeline import RetrievalPipeline
from wetqa.retrieval.ranking.stages import SearchStage


def after(first, *stages, name: str = "test") -> RetrievalPipeline:
    """``first`` (any retriever) followed by ``stages``; the first stage retrieves as deep as they read."""
    need = max([getattr(s, "depth", 0) for s in stages] + [0])
    return RetrievalPipeline(
        [SearchStage(first), *stages], name=name, chunks=getattr(first, "chunks", None), engines=[first], need=need
    )


def rescorer(first, encoder, cache, **options) -> RetrievalPipeline:
    """A first stage followed by dense re-scoring, as `--rescore MODEL` over a chunk index assembles it."""
    from wetqa.retrieval.ranking.rescoring import DenseRescoreStage

    stage = DenseRescoreStage(encoder, cache, analyzer=getattr(first, "analyzer", None), **options)
    return after(first, stage, name="first+dense")
