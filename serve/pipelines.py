"""What the server serves: named pipelines (retriever + generator + k), loaded once at start-up."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from wetqa.generation import GeneratorConfig, Pipeline, make_backend, resolve_generator
from wetqa.retrieval import open_retriever, read_index_meta


@dataclass(slots=True)
class ServedPipeline:
    name: str
    indexes: list[str]
    generator: GeneratorConfig
    k: int = 3
    fusion: str = "rrf"
    pipeline: Pipeline | None = field(default=None, repr=False)

    @property
    def inline_retrieval(self) -> bool:
        """Retrieval cheap enough for the event loop: bm25s or articles (numpy only, about a millisecond)."""
        if self.pipeline is None:
            return False
        names = [r.name for r in getattr(self.pipeline.retriever, "retrievers", [self.pipeline.retriever])]
        return all(n in ("bm25s", "articles") for n in names)

    @property
    def inline(self) -> bool:
        """Answer on the event loop: only a backend that declares itself ``inline_safe``, over inline retrieval."""
        if self.pipeline is None or not getattr(self.pipeline.backend, "inline_safe", False):
            return False
        return self.inline_retrieval

    @property
    def loaded(self) -> Pipeline:
        if self.pipeline is None:
            raise RuntimeError(f"served pipeline {self.name!r} is not loaded")
        return self.pipeline

    def load(self) -> ServedPipeline:
        self.pipeline = Pipeline(
            open_retriever(self.indexes, fusion=self.fusion), make_backend(self.generator), k=self.k
        )
        return self

    def describe(self) -> dict:
        return {
            "id": self.name,
            "object": "model",
            "created": 0,
            "owned_by": "wetqa",
            "retriever": self.pipeline.retriever.name if self.pipeline else None,
            "generator": self.generator.kind + (f":{self.generator.model}" if self.generator.model else ""),
            "k": self.k,
        }


def served_pipeline_name(indexes: list[str], generator: str) -> str:
    kinds = []
    for i in indexes:
        meta = read_index_meta(i)
        kind = meta["retriever"]
        if kind == "dense":
            model = str(meta["options"].get("model", ""))
            kind = "e5" if "e5" in model.lower() else "dense"
        if meta.get("rescore"):
            model = str(meta["rescore"]["model"])
            kind += "+e5" if "e5" in model.lower() else "+dense"
        kinds.append(kind)
    gen = generator.split("/")[-1].lower()
    return "wetqa-" + "+".join(kinds) + "-" + gen


def make_served_pipeline(
    indexes: list[str], generator: str = "extractive", name: str | None = None, k: int = 3, **gen_overrides
) -> ServedPipeline:
    cfg = resolve_generator(generator, **gen_overrides)
    return ServedPipeline(
        name or served_pipeline_name([str(i) for i in indexes], generator), [str(Path(i)) for i in indexes], cfg, k
    )
