"""Dense re-scoring of a first stage's candidates, with an embedding cache keyed by text.

Encoding the whole corpus with multilingual-E5 costs most of an hour on two CPU cores; re-scoring
encodes only what the first stage returns (for an article hit: each of its chunks, the article
taking its best cosine), and every vector is kept on disk by the hash of its text, so a question
about an article seen before costs one query encoding. The fused score is
``(1 - weight) * first + weight * dense``, each min-max normalised over the candidates.
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from ._base import Hit, RetrievalError, Retriever, check_k
from .encoders import Encoder


def _key(text: str) -> str:
    return hashlib.sha1(text.encode("utf-8")).hexdigest()


class EmbeddingCache:
    """Passage vectors of one model by text hash: ``keys.txt`` and ``vectors.f32``, both append-only.

    An interrupted append leaves one file ahead of the other; loading keeps the records both
    hold and cuts the rest off, so the cache never pairs a key with another text's vector.
    """

    def __init__(self, folder: str | Path, model: str, dim: int):
        self.folder = Path(folder)
        self.folder.mkdir(parents=True, exist_ok=True)
        meta_path = self.folder / "cache.json"
        meta = {"model": model, "dim": dim}
        if meta_path.is_file():
            old = json.loads(meta_path.read_text(encoding="utf-8"))
            if old != meta:
                raise RetrievalError(
                    f"embedding cache {self.folder} holds vectors of {old.get('model')!r} "
                    f"(dim {old.get('dim')}), not of {model!r}; give another cache folder"
                )
        else:
            meta_path.write_text(json.dumps(meta), encoding="utf-8")
        self.dim = dim
        self._keys_path, self._vec_path = self.folder / "keys.txt", self.folder / "vectors.f32"
        keys = self._keys_path.read_text(encoding="utf-8").split("\n")[:-1] if self._keys_path.is_file() else []
        raw = self._vec_path.read_bytes() if self._vec_path.is_file() else b""
        n = min(len(keys), len(raw) // (4 * dim))
        if n != len(keys) or n * 4 * dim != len(raw):
            self._keys_path.write_text("".join(k + "\n" for k in keys[:n]), encoding="utf-8")
            with open(self._vec_path, "r+b" if self._vec_path.exists() else "wb") as fh:
                fh.truncate(n * 4 * dim)
        vectors = np.frombuffer(raw[: n * 4 * dim], dtype=np.float32).reshape(n, dim)
        self._rows = {k: i for i, k in enumerate(keys[:n])}
        self._n_rows = n  # rows on disk (a key written twice by an older version keeps its last row)
        self._vectors = [vectors]
        self.lock = threading.RLock()

    def __len__(self) -> int:
        return self._n_rows

    def _matrix(self) -> np.ndarray:
        if len(self._vectors) > 1:
            self._vectors = [np.concatenate(self._vectors)]
        return self._vectors[0]

    def vectors(self, texts: Sequence[str], encoder: Encoder, progress: bool = False) -> np.ndarray:
        keys = [_key(t) for t in texts]
        with self.lock:  # one encoder call at a time fills the cache; concurrent readers wait
            # One row per distinct text: two articles may hold the same text ("Vervallen").
            first_index: dict[str, int] = {}
            for i, k in enumerate(keys):
                if k not in self._rows:
                    first_index.setdefault(k, i)
            if first_index:
                missing = list(first_index)
                fresh = np.ascontiguousarray(
                    encoder.encode_passages([texts[first_index[k]] for k in missing], progress=progress),
                    dtype=np.float32,
                )
                with open(self._vec_path, "ab") as vf, open(self._keys_path, "a", encoding="utf-8") as kf:
                    vf.write(fresh.tobytes())
                    vf.flush()
                    kf.write("".join(k + "\n" for k in missing))
                start = self._n_rows
                for j, k in enumerate(missing):
                    self._rows[k] = start + j
                self._n_rows += len(missing)
                self._vectors.append(fresh)
            matrix = self._matrix()
            return matrix[[self._rows[k] for k in keys]]


def model_identity(model: str) -> str:
    """A model as the cache knows it: a local folder by its absolute path, anything else by its name."""
    path = Path(model).expanduser()
    return str(path.resolve()) if path.exists() else model


def cache_for(model: str, dim: int) -> EmbeddingCache:
    """The shared passage-vector cache of a model, under ``$WETQA_CACHE/embeddings``."""
    from wetqa.home import cache_root

    ident = model_identity(model)
    return EmbeddingCache(cache_root() / "embeddings" / hashlib.sha1(ident.encode()).hexdigest()[:16], ident, dim)


def _minmax(x: np.ndarray) -> np.ndarray:
    lo, hi = float(x.min()), float(x.max())
    return (x - lo) / (hi - lo) if hi > lo else np.ones_like(x)


class DenseRescorer:
    """Any retriever, its top ``depth`` hits re-ranked by fusing in a dense model's cosine."""

    def __init__(
        self, retriever: Retriever, encoder: Encoder, cache: EmbeddingCache, weight: float = 0.7, depth: int = 30
    ):
        if not 0 <= weight <= 1:
            raise RetrievalError(f"the dense weight must be between 0 and 1, got {weight}")
        self.retriever, self.encoder, self.cache = retriever, encoder, cache
        self.weight, self.depth = weight, depth
        self.name = f"{retriever.name}+dense"

    @property
    def chunks(self):
        return getattr(self.retriever, "chunks", None)

    def batch_search(self, queries: Sequence[str], k: int = 10, threads: int = 1) -> list[list[Hit]]:
        check_k(k)
        first = self.retriever.batch_search(queries, max(k, self.depth), threads)
        # The encoder serialises its own model calls and joins concurrent requests' queries into one.
        query_vectors = self.encoder.encode_queries(list(queries))
        return [self._rescore(hits, qv, k) for hits, qv in zip(first, query_vectors)]

    def _rescore(self, hits: list[Hit], query_vector: np.ndarray, k: int) -> list[Hit]:
        if not hits:
            return []
        groups = [h.article_chunks or (h.chunk,) for h in hits]
        flat = [c.indexed_text for g in groups for c in g]
        cos = self.cache.vectors(flat, self.encoder) @ query_vector
        dense = np.empty(len(hits), dtype=np.float32)
        at = 0
        for i, g in enumerate(groups):
            dense[i] = cos[at : at + len(g)].max()
            at += len(g)
        first = np.asarray([h.score for h in hits], dtype=np.float32)
        fused = (1 - self.weight) * _minmax(first) + self.weight * _minmax(dense)
        order = sorted(range(len(hits)), key=lambda i: (-fused[i], i))[:k]
        return [
            Hit(hits[i].chunk, float(fused[i]), r, self.name, hits[i].article_chunks, hits[i].article_paragraphs)
            for r, i in enumerate(order, 1)
        ]

    def search(self, query: str, k: int = 10) -> list[Hit]:
        return self.batch_search([query], k)[0]
