"""Vectors shipped with wetqa (the written questions' reader vectors): packed small, looked up by text, used only
with the model that made them."""

from __future__ import annotations

import logging

import numpy as np
import pytest

from wetqa.retrieval.models.vector_pack import PROBE_COSINE, VectorPack, cut, pack_for, write_pack

TEXTS = [f"Mag mijn baas mij vraag {i} stellen?" for i in range(40)]


def _vectors(n: int, dim: int = 64, seed: int = 0) -> np.ndarray:
    v = np.random.default_rng(seed).normal(size=(n, dim)).astype(np.float32)
    return v / np.linalg.norm(v, axis=1, keepdims=True)


@pytest.mark.unit
def test_a_pack_gives_back_each_texts_cut_vector_and_nothing_for_a_text_it_lacks(tmp_path):
    vectors = _vectors(len(TEXTS))
    meta = write_pack(tmp_path / "p.npz", TEXTS + TEXTS[:3], np.concatenate([vectors, vectors[:3]]), 16,
                      vectors[0], {"reader": "x"})  # fmt: skip
    assert meta["texts"] == len(TEXTS) and meta["dim"] == 16  # a text given twice is kept once
    pack = VectorPack(tmp_path / "p.npz")
    asked = [TEXTS[5], "Een vraag die de pack niet kent?", TEXTS[0]]
    found, got = pack.lookup(asked)
    assert found.tolist() == [True, False, True]
    want = cut(vectors[[5, 0]], 16)
    assert (np.sum(got[[0, 2]] * want, axis=1) > 0.999).all()  # int8 keeps each direction
    assert not got[1].any() and got.shape == (3, 16)
    assert pack.fits(vectors[0]) > 0.999 and pack.fits(vectors[1]) < PROBE_COSINE


@pytest.mark.unit
def test_a_pack_of_another_model_or_an_unreadable_one_is_not_used(tmp_path, caplog):
    vectors = _vectors(len(TEXTS))
    write_pack(tmp_path / "p.npz", TEXTS, vectors, 16, vectors[0], {})
    assert pack_for(tmp_path / "p.npz", lambda: vectors[0]) is not None
    assert pack_for(tmp_path / "p.npz", lambda: _vectors(1, seed=7)[0]) is None  # another model's probe
    assert pack_for(tmp_path / "absent.npz", lambda: 1 / 0) is None  # no pack: the model is not even asked
    assert pack_for(tmp_path / "p.npz", lambda: vectors[0][:8]) is None  # a narrower model: another one
    write_pack(tmp_path / "q.npz", TEXTS, vectors, 16, vectors[0], {"variant": "int8", "prompt": "p: "})
    assert pack_for(tmp_path / "q.npz", lambda: vectors[0], {"variant": "int8", "prompt": "p: "}) is not None
    assert pack_for(tmp_path / "q.npz", lambda: vectors[0], {"variant": "fp32", "prompt": "p: "}) is None
    (tmp_path / "bad.npz").write_bytes(b"not a zip at all")
    cut_short = tmp_path / "short.npz"
    cut_short.write_bytes((tmp_path / "p.npz").read_bytes()[:500])
    with caplog.at_level(logging.WARNING, logger="wetqa.retrieval"):
        assert pack_for(tmp_path / "bad.npz", lambda: vectors[0]) is None
        assert pack_for(cut_short, lambda: vectors[0]) is None
    assert "bad.npz is not a vector pack" in caplog.text and "short.npz is not a vector pack" in caplog.text
