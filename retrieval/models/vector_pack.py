"""Vectors that ship with wetqa: texts read ahead by a model, kept small, used only with the model that read them.

A person's question is compared with the written questions of its candidates (the questions view); reading
them as they come cost a question several seconds on 2 cores (about 100 short texts at 33 a second). The
question set is known ahead, so its vectors can be too: a pack holds, for each text, its vector at a
Matryoshka cut (the first ``dim`` dimensions, normalised again) quantised to int8 (a scale per vector is not
kept: only directions are compared). 50,000 questions at 256 dimensions are 12.8 MB.

A pack is used only with the model that made it, checked by behaviour rather than by name or path: it records
the vector of a probe text read as its texts were, and a loaded model must give that vector again (cosine at
least :data:`PROBE_COSINE`). Another model, a damaged one or another export is never given the pack's vectors;
its texts are read as they come, as without a pack.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

from wetqa.console import first_line

log = logging.getLogger("wetqa.retrieval")

PROBE_TEXT = "Mag mijn baas mij verplichten om op zondag te werken?"
PROBE_COSINE = 0.999  # the probe is read alone, as it was when packed: the same model gives the same vector


def text_keys(texts: Sequence[str]) -> np.ndarray:
    """A 64-bit key of each text (the first 8 bytes of its SHA-256)."""
    return np.asarray(
        [int.from_bytes(hashlib.sha256(t.encode("utf-8")).digest()[:8], "little") for t in texts], dtype=np.uint64
    )


def cut(vectors: np.ndarray, dim: int) -> np.ndarray:
    """The first ``dim`` dimensions of each vector, normalised again (a Matryoshka cut)."""
    part = np.asarray(vectors, dtype=np.float32)[:, :dim]
    return part / np.maximum(np.linalg.norm(part, axis=1, keepdims=True), 1e-12)


def quantised(vectors: np.ndarray) -> np.ndarray:
    """Each vector's direction in int8 (its largest component at +-127)."""
    v = np.asarray(vectors, dtype=np.float32)
    scale = np.maximum(np.abs(v).max(axis=1, keepdims=True), 1e-12)
    return np.clip(np.rint(v / scale * 127.0), -127, 127).astype(np.int8)


def write_pack(path: Path, texts: Sequence[str], vectors: np.ndarray, dim: int, probe: np.ndarray, about: dict) -> dict:
    """Write a pack of ``texts`` and their (full) ``vectors`` cut at ``dim``; ``probe``: the model's vector of
    :data:`PROBE_TEXT` read as the texts were; ``about``: what made it (recorded, not checked)."""
    from wetqa.io import atomic_file

    if len(texts) != len(vectors):
        raise ValueError(f"{len(texts)} texts but {len(vectors)} vectors")
    keys = text_keys(texts)
    order = np.argsort(keys, kind="stable")
    keys, packed = keys[order], quantised(cut(vectors, dim))[order]
    if len(keys) > 1 and (np.diff(keys) == 0).any():
        keep = np.concatenate([[True], np.diff(keys) != 0])  # the same text twice: kept once
        keys, packed = keys[keep], packed[keep]
    meta = {"dim": int(dim), "texts": int(len(keys)), "probe": cut(np.atleast_2d(probe), dim)[0].round(6).tolist(),
            **about}  # fmt: skip
    with atomic_file(Path(path), "wb", encoding=None) as fh:
        np.savez(fh, keys=keys, vectors=packed, meta=np.asarray(json.dumps(meta, ensure_ascii=False)))
    return meta


class VectorPack:
    """A pack's vectors, looked up by text (see the module's words for when they are used)."""

    def __init__(self, path: Path):
        self.path = Path(path)
        try:
            with np.load(self.path, allow_pickle=False) as data:
                self.keys = np.asarray(data["keys"], dtype=np.uint64)
                self.vectors = np.asarray(data["vectors"], dtype=np.int8)
                self.meta = json.loads(str(data["meta"]))
            self.dim = int(self.meta["dim"])
            self.probe = np.asarray(self.meta["probe"], dtype=np.float32)
        except Exception as exc:  # noqa: BLE001 - cut short (BadZipFile, EOFError), edited, not a pack at all
            raise ValueError(f"{self.path} is not a vector pack ({first_line(exc)})") from None
        if self.vectors.shape != (len(self.keys), self.dim) or self.probe.shape != (self.dim,):
            raise ValueError(f"{self.path} is not a vector pack (its arrays do not agree)")

    def __len__(self) -> int:
        return len(self.keys)

    def fits(self, probe: np.ndarray) -> float:
        """The cosine of a model's vector of :data:`PROBE_TEXT` (read as the texts are) with the pack's; 0 for a
        model narrower than the pack (another model)."""
        probe = np.atleast_2d(np.asarray(probe, dtype=np.float32))
        if probe.shape[1] < self.dim:
            return 0.0
        return float(cut(probe, self.dim)[0] @ self.probe)

    def lookup(self, texts: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
        """(found, vectors): which texts the pack holds, and their vectors (normalised, ``dim`` wide; rows of
        texts not found are zero)."""
        keys = text_keys(texts)
        at = np.searchsorted(self.keys, keys)
        at = np.minimum(at, max(len(self.keys) - 1, 0))
        found = (self.keys[at] == keys) if len(self.keys) else np.zeros(len(keys), dtype=bool)
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        if found.any():
            out[found] = cut(self.vectors[at[found]].astype(np.float32), self.dim)
        return found, out


def pack_for(path: Path | None, probe: Callable[[], np.ndarray], made_as: dict | None = None) -> VectorPack | None:
    """The pack at ``path`` when there is one and the model (its vector of :data:`PROBE_TEXT`, asked for only
    when a pack is there) is the one that made it, read as the pack records (``made_as``: the graph variant and
    prompt, each compared with the pack's record when it has one); else None, with a warning when the pack is
    unreadable, a note when another model made it."""
    if path is None or not Path(path).is_file():
        return None
    try:
        pack = VectorPack(Path(path))
    except ValueError as exc:
        log.warning("wetqa: warning: %s; its texts are read as they come", exc)
        return None
    differ = [k for k, v in (made_as or {}).items() if k in pack.meta and pack.meta[k] != v]
    if differ:
        log.info("the vectors of %s were read otherwise (%s differ); read as they come", path, ", ".join(differ))
        return None
    cosine = pack.fits(probe())
    if not cosine >= PROBE_COSINE:
        log.info("the vectors of %s were made by another model (probe cosine %.3f); read as they come", path, cosine)
        return None
    return pack
