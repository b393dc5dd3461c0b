"""What the server serves: named pipelines (a :class:`PipelineSpec` each), loaded once at start-up."""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass, field

from wetqa.generation import Pipeline, PipelineSpec
from wetqa.retrieval import read_index_meta

from .protocol import ModelCard


@dataclass(slots=True)
class ServedPipeline:
    name: str
    spec: PipelineSpec
    pipeline: Pipeline | None = field(default=None, repr=False)

    @property
    def inline_retrieval(self) -> bool:
        """Retrieval cheap enough for the event loop: a pipeline of model-free stages over inline engines
        (:attr:`RetrievalPipeline.inline`), or a retriever registered as ``inline`` (numpy, a millisecond)."""
        if self.pipeline is None:
            return False
        return self.pipeline.retriever.inline

    @property
    def inline(self) -> bool:
        """Answer on the event loop: only a backend that declares itself ``inline_safe``, over inline retrieval."""
        if self.pipeline is None or not self.pipeline.backend.inline_safe:
            return False
        return self.inline_retrieval

    @property
    def loaded(self) -> Pipeline:
        if self.pipeline is None:
            raise RuntimeError(f"served pipeline {self.name!r} is not loaded")
        return self.pipeline

    def load(self) -> ServedPipeline:
        if self.pipeline is None:
            self.pipeline = self.spec.build()
            # Compiled search kernels are prepared beside serving: until they are, the same hits come
            # from reading every posting (a first compile takes seconds; numba caches it on disk).
            threading.Thread(target=_warm, args=(self.pipeline.retriever,), name="wetqa-warm", daemon=True).start()
        return self

    def describe(self) -> ModelCard:
        g = self.spec.generator
        return ModelCard(
            id=self.name,
            retriever=self.pipeline.retriever.name if self.pipeline else None,
            generator=g.kind + (f":{g.model}" if g.model else ""),
            k=self.spec.k,
        )


def _warm(retriever) -> None:
    from wetqa.retrieval import warm_up

    try:
        warm_up(retriever)
    except Exception:  # noqa: BLE001 - a kernel that cannot compile leaves the exhaustive search serving
        logging.getLogger("wetqa.serve").warning("search kernels not prepared", exc_info=True)


def served_pipeline_name(spec: PipelineSpec) -> str:
    kinds = []
    for i in spec.retrieval.index_paths:
        meta = read_index_meta(i)
        kind = meta["retriever"]
        if kind == "dense":
            model = str(meta["options"].get("model", ""))
            kind = "e5" if "e5" in model.lower() else "dense"
        rescore = spec.retrieval.rescore or (meta.get("rescore") or {}).get("model")
        if rescore:
            kind += "+e5" if "e5" in str(rescore).lower() else "+dense"
        kinds.append(kind)
    gen = spec.generator.name.split("/")[-1].lower()
    return "wetqa-" + "+".join(kinds) + "-" + gen
