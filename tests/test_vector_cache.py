"""A damaged, non-database or read-only vector cache is never used silently and never an internal error: the
file is named, set aside and rebuilt (or the vectors kept in memory), and the vectors served are the model's."""

from __future__ import annotations

import logging
import os

import numpy as np
import pytest

from wetqa.retrieval.models.vectors import EmbeddingCache

pytestmark = pytest.mark.unit
DIM = 8


class Counting:
    """A deterministic encoder (each text's vector from its hash), counting what it encodes."""

    dim = DIM

    def __init__(self):
        self.encoded = 0

    def encode_passages(self, texts, progress=False):
        self.encoded += len(texts)
        out = np.stack([np.random.default_rng(abs(hash(t)) % 2**32).normal(size=DIM) for t in texts]).astype(np.float32)
        return out / np.linalg.norm(out, axis=1, keepdims=True)


TEXTS = [f"artikel {i} over het gezag van een ouder" for i in range(400)]


def _filled(folder):
    encoder = Counting()
    cache = EmbeddingCache(folder, "m", DIM)
    truth = cache.vectors(TEXTS, encoder)
    cache.db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    cache.db.close()
    return truth


def test_bytes_overwritten_in_a_cache_are_never_served(tmp_path, caplog):
    truth = _filled(tmp_path / "c")
    path = tmp_path / "c" / EmbeddingCache.FILE
    data = bytearray(path.read_bytes())
    middle = len(data) // 2
    data[middle : middle + 3000] = os.urandom(3000)  # random bytes over the middle of the file
    path.write_bytes(bytes(data))
    encoder = Counting()
    with caplog.at_level(logging.WARNING):
        got = EmbeddingCache(tmp_path / "c", "m", DIM).vectors(TEXTS, encoder)
    assert np.allclose(got, truth, atol=1e-6)  # what the model gives: the damaged rows encoded again
    assert encoder.encoded > 0
    damaged = [r.getMessage() for r in caplog.records if "vector cache" in r.getMessage()]
    if any(p.name.endswith(".damaged") for p in path.parent.iterdir()):  # SQLite called the file malformed
        assert damaged and str(path) in damaged[0] and "set aside" in damaged[0]


def test_a_file_that_is_not_a_database_is_named_and_rebuilt(tmp_path, caplog):
    folder = tmp_path / "c"
    folder.mkdir()
    (folder / EmbeddingCache.FILE).write_bytes(b"this is not sqlite" * 100)
    with caplog.at_level(logging.WARNING):
        cache = EmbeddingCache(folder, "m", DIM)
        got = cache.vectors(TEXTS[:5], Counting())
    assert got.shape == (5, DIM)
    message = " ".join(r.getMessage() for r in caplog.records)
    assert str(folder / EmbeddingCache.FILE) in message and "not a vector cache" in message
    assert (folder / (EmbeddingCache.FILE + ".damaged")).read_bytes().startswith(b"this is not sqlite")


def test_a_read_only_cache_keeps_its_vectors_in_memory(tmp_path, caplog):
    if os.geteuid() == 0:
        pytest.skip("root writes into read-only folders")
    truth = _filled(tmp_path / "c")
    os.chmod(tmp_path / "c" / EmbeddingCache.FILE, 0o444)
    os.chmod(tmp_path / "c", 0o555)
    try:
        with caplog.at_level(logging.WARNING):
            got = EmbeddingCache(tmp_path / "c", "m", DIM).vectors(TEXTS[:20] + ["een nieuwe tekst"], Counting())
        assert np.allclose(got[:20], truth[:20], atol=1e-6) and got.shape == (21, DIM)
    finally:
        os.chmod(tmp_path / "c", 0o755)


def test_a_row_whose_bytes_changed_is_encoded_again(tmp_path):
    truth = _filled(tmp_path / "c")
    cache = EmbeddingCache(tmp_path / "c", "m", DIM)
    key, blob = cache.db.execute("SELECT key, v FROM vectors LIMIT 1").fetchone()
    flipped = bytearray(blob)
    flipped[0] ^= 0xFF  # one byte of one vector
    cache.db.execute("UPDATE vectors SET v = ? WHERE key = ?", (bytes(flipped), key))
    cache.db.commit()
    encoder = Counting()
    assert np.allclose(cache.vectors(TEXTS, encoder), truth, atol=1e-6)
    assert encoder.encoded == 1  # that row alone
