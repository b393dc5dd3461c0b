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
    if any(".damaged-" in p.name for p in path.parent.iterdir()):  # SQLite called the file malformed
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
    (aside,) = folder.glob(EmbeddingCache.FILE + ".damaged-*")
    assert aside.read_bytes().startswith(b"this is not sqlite")


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


def test_a_row_of_an_older_wetqa_is_checked_once_and_never_served_unchecked(tmp_path):
    """Rows without a checksum (every cache made before it) were served unchecked (review finding 7): a cache of
    an older wetqa is checked once (SQLite's quick_check) and its rows given their checksum; a row without one
    that turns up later is encoded again."""
    import json
    import sqlite3

    folder = tmp_path / "c"
    encoder = Counting()
    truth = EmbeddingCache(folder, "m", DIM).vectors(TEXTS[:3], encoder)
    # As an older wetqa left it: no format recorded, each row the vector's bytes alone.
    meta = json.loads((folder / "cache.json").read_text())
    meta.pop("format", None)
    (folder / "cache.json").write_text(json.dumps(meta))
    db = sqlite3.connect(folder / EmbeddingCache.FILE)
    for key, blob in db.execute("SELECT key, v FROM vectors").fetchall():
        db.execute("UPDATE vectors SET v = ? WHERE key = ?", (blob[: 4 * DIM], key))
    db.commit()
    db.close()
    again = Counting()
    cache = EmbeddingCache(folder, "m", DIM)
    assert np.allclose(cache.vectors(TEXTS[:3], again), truth) and again.encoded == 0  # migrated, not re-encoded
    assert json.loads((folder / "cache.json").read_text())["format"] == 2
    # A row without a checksum in a cache already migrated (random bytes, as an older wetqa might write): a miss.
    from wetqa.retrieval.models.vectors import _key

    with cache.lock:
        cache.db.execute("INSERT OR REPLACE INTO vectors VALUES (?, ?)", (_key(TEXTS[5]), os.urandom(4 * DIM)))
        cache.db.commit()
    fresh = Counting()
    got = cache.vectors([TEXTS[5]], fresh)
    assert fresh.encoded == 1 and np.allclose(got, Counting().encode_passages([TEXTS[5]]))


def test_a_busy_cache_is_not_taken_for_a_damaged_one(tmp_path, caplog):
    """Every SQLite error set the cache aside as damaged ("database is locked" included), and a second event
    overwrote the first .damaged copy (review finding 6): only a corrupt file or one that is not a database is
    damaged; a busy one is left as it is, and the vectors still served."""
    import sqlite3

    truth = _filled(tmp_path / "c")
    cache = EmbeddingCache(tmp_path / "c", "m", DIM)
    cache.db.execute("PRAGMA busy_timeout=100")
    other = sqlite3.connect(tmp_path / "c" / EmbeddingCache.FILE)
    other.execute("BEGIN IMMEDIATE")  # another process holds the write lock past the timeout
    try:
        with caplog.at_level(logging.WARNING):
            got = cache.vectors(["een tekst die er nog niet in staat", *TEXTS[:2]], Counting())
    finally:
        other.rollback()
        other.close()
    assert np.allclose(got[1:], truth[:2])
    assert not [p for p in (tmp_path / "c").iterdir() if ".damaged" in p.name]
    assert "busy" in caplog.text or "locked" in caplog.text


def test_each_damaged_copy_is_kept_under_a_name_of_its_own(tmp_path):
    for _ in range(2):
        folder = tmp_path / "c"
        folder.mkdir(exist_ok=True)
        (folder / EmbeddingCache.FILE).write_bytes(b"not a database at all" * 100)
        cache = EmbeddingCache(folder, "m", DIM)
        cache.vectors(TEXTS[:1], Counting())
        cache.db.execute("PRAGMA wal_checkpoint(TRUNCATE)")  # as a process that ended leaves it
        cache.db.close()
    aside = [
        p.name for p in (tmp_path / "c").iterdir() if ".damaged" in p.name and not p.name.endswith(("-wal", "-shm"))
    ]
    assert len(aside) == 2, aside


def test_a_cache_that_cannot_be_opened_keeps_its_vectors_in_memory(tmp_path, monkeypatch, caplog):
    """A cache SQLite cannot open (a WAL cache on a read-only mount: CANTOPEN, not READONLY) became an error on
    every query (second review, finding 1): it is named, and this process keeps its vectors in memory."""
    import sqlite3

    with pytest.raises(sqlite3.OperationalError) as raised:
        sqlite3.connect("/nonexistent/x.db")
    cantopen = raised.value
    original = EmbeddingCache._open
    calls = []

    def failing_once(self):
        calls.append(1)
        if len(calls) == 1:
            raise cantopen
        return original(self)

    monkeypatch.setattr(EmbeddingCache, "_open", failing_once)
    with caplog.at_level(logging.WARNING):
        cache = EmbeddingCache(tmp_path / "c", "m", DIM)
        got = cache.vectors(TEXTS[:3], Counting())
    assert cache.memory and got.shape == (3, DIM)
    assert "in memory" in caplog.text and str(tmp_path / "c") in caplog.text


def test_an_older_caches_damage_found_by_its_check_is_set_aside_in_one_line(tmp_path, caplog):
    """The check of an older wetqa's cache raised SQLite's own error on the damage it looks for (second review,
    finding 2): the file is set aside and made again, the warning one line."""
    import json

    folder = tmp_path / "c"
    _filled(folder)
    meta = json.loads((folder / "cache.json").read_text())
    meta.pop("format", None)
    (folder / "cache.json").write_text(json.dumps(meta))
    path = folder / EmbeddingCache.FILE
    data = bytearray(path.read_bytes())
    data[2 * 4096 : 2 * 4096 + 16] = b"\xff" * 16  # the header of page 3
    path.write_bytes(bytes(data))
    with caplog.at_level(logging.WARNING):
        cache = EmbeddingCache(folder, "m", DIM)
        got = cache.vectors(TEXTS[:3], Counting())
    assert got.shape == (3, DIM)
    assert list(folder.glob(EmbeddingCache.FILE + ".damaged-*"))
    assert all("\n" not in r.getMessage() for r in caplog.records)
