"""Vectors of a model's passages by the hash of their text, in SQLite: encoded once, read by row.

A question about an article seen before costs one query encoding; ``wetqa index --precompute`` fills the
cache for a whole corpus at build time, and the reader's article vectors are kept the same way.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import sqlite3
import threading
import time
import zlib
from collections.abc import Sequence
from concurrent.futures import Future
from pathlib import Path
from typing import Protocol

import numpy as np

from wetqa.console import first_line

from .._base import RetrievalError


def _key(text: str) -> bytes:
    return hashlib.sha1(text.encode("utf-8")).digest()


log = logging.getLogger("wetqa.retrieval")


def _packed(vector: np.ndarray) -> bytes:
    """A vector as a row holds it: its float32 bytes and their CRC-32 (a row whose bytes changed is not served)."""
    data = np.ascontiguousarray(vector, dtype=np.float32).tobytes()
    return data + zlib.crc32(data).to_bytes(4, "little")


def _unpacked(blob: bytes, dim: int) -> np.ndarray | None:
    """The vector of a row, or None when its bytes do not check (a row without a checksum included: an older
    wetqa's rows are given theirs when its cache is first opened, see :meth:`EmbeddingCache._migrate`)."""
    size = 4 * dim
    if len(blob) != size + 4:
        return None
    data = blob[:size]
    if zlib.crc32(data).to_bytes(4, "little") != blob[size:]:
        return None
    return np.frombuffer(data, dtype=np.float32)


# The format of the rows (2: each with its CRC-32), recorded in cache.json.
FORMAT = 2


def _one_line(exc: BaseException) -> str:
    return first_line(exc) or type(exc).__name__


def _damaged(exc: sqlite3.Error) -> bool:
    """Whether SQLite says the file itself is bad (corrupt, or not a database). A busy, locked, full or
    unreadable file is not damaged: it is left where it is."""
    code = getattr(exc, "sqlite_errorcode", None)  # an error of SQLite's own; None for one made here
    return code is not None and code & 0xFF in (sqlite3.SQLITE_CORRUPT, sqlite3.SQLITE_NOTADB)


class PassageEncoder(Protocol):
    """What the cache asks of an encoder: the vectors of the passages it lacks."""

    def encode_passages(self, texts: Sequence[str], progress: bool = False) -> np.ndarray: ...


class EmbeddingCache:
    """Passage vectors of one model by text hash, in an SQLite file (``vectors.sqlite``).

    Lookups read only the rows asked for, so the cache can hold a whole corpus's vectors without a
    process loading them; writes are transactions, so a killed process leaves the cache as it was
    before its last batch, and two processes may fill it at once. A cache of an older wetqa
    (``keys.txt`` + ``vectors.f32``, loaded whole) is taken over on first use.
    """

    FILE = "vectors.sqlite"

    def __init__(self, folder: str | Path, model: str, dim: int, weights: str | None = None,
                 content: str | None = None):  # fmt: skip
        """``weights``: what the model's weights are (:func:`weights_identity`); ``content``: what every file of
        the model folder holds (:func:`~.content.content_identity`). Vectors cached for other weights or another
        content of the same model (a reader trained again into its folder, a damaged model, the repaired one)
        are dropped, not served."""
        self.folder = Path(folder)
        self.folder.mkdir(parents=True, exist_ok=True)
        meta_path = self.folder / "cache.json"
        meta = {"model": model, "dim": dim}
        old: dict = {}
        if meta_path.is_file():
            old = json.loads(meta_path.read_text(encoding="utf-8"))
            if {k: old.get(k) for k in meta} != meta:
                raise RetrievalError(
                    f"embedding cache {self.folder} holds vectors of {old.get('model')!r} "
                    f"(dim {old.get('dim')}), not of {model!r}; give another cache folder"
                )
        # A cache that recorded its model's content is stale when that moved; one of a wetqa before contents were
        # recorded, when its weights did (its vectors are then taken to be of the content there now).
        if content is not None and old.get("content") is not None:
            stale = old.get("content") != content
        else:
            stale = weights is not None and old.get("weights") not in (None, weights)
        # An older wetqa's rows hold no checksum: checked and given one (a stale cache's rows are dropped anyway).
        migrate = meta_path.is_file() and old.get("format") != FORMAT and not stale
        changed = weights is not None and old.get("weights") != weights or content != old.get("content")
        if changed or not meta_path.is_file():
            # A cache that records no weights (an older wetqa's) is taken to be of the weights there now.
            from wetqa.io import write_json

            record = {**meta, "weights": weights} if weights else dict(meta)
            if content is not None:
                record["content"] = content
            if not migrate:  # a new or a stale cache: every row it will hold has its checksum
                record["format"] = FORMAT
            elif "format" in old:
                record["format"] = old["format"]
            write_json(meta_path, record)
        self.dim = dim
        self.weights = weights  # what the vectors are of (a reader's identity reads it: the weights hashed once)
        self.content = content  # what the model folder holds (None for a model known by its hub id)
        self.lock = threading.RLock()  # the writing connection: one transaction at a time
        self._readers = threading.local()  # each thread reads through its own connection (WAL: never blocked)
        self._encoding: dict[bytes, Future] = {}  # texts some request is encoding now, by key
        self._encoding_lock = threading.Lock()
        self.memory = False  # the file cannot be written: this process keeps its vectors in memory
        self._generation = 0  # bumped when the file is set aside: readers' connections to it are reopened
        try:
            self.db = self._open()
        except sqlite3.DatabaseError as exc:
            if _damaged(exc):
                self.db = self._replace(exc)
            else:  # cannot be opened here (a read-only mount, a folder not ours to write): never an error
                log.warning("wetqa: warning: the vector cache %s cannot be opened (%s): this process keeps its "
                            "vectors in memory", self.path, _one_line(exc))  # fmt: skip
                self.db = self._in_memory()
        if migrate and not self.memory:
            self._migrate(meta_path)
        if stale:
            self.db.execute("DELETE FROM vectors")  # wetqa's own cache: the vectors of the weights before
        self.db.commit()
        self._take_over_legacy()

    @property
    def path(self) -> Path:
        return self.folder / self.FILE

    def _open(self) -> sqlite3.Connection:
        db = sqlite3.connect(self.path, timeout=60, check_same_thread=False)
        try:
            db.execute("PRAGMA journal_mode=WAL")
            db.execute("CREATE TABLE IF NOT EXISTS vectors (key BLOB PRIMARY KEY, v BLOB) WITHOUT ROWID")
            db.commit()
        except sqlite3.OperationalError as exc:
            if exc.sqlite_errorcode & 0xFF != sqlite3.SQLITE_READONLY:
                db.close()
                raise
            db.close()
            log.warning(
                "wetqa: warning: the vector cache %s cannot be written (%s): this process keeps its vectors in memory",
                self.path, exc,
            )  # fmt: skip
            return self._in_memory()
        except sqlite3.DatabaseError:
            db.close()
            raise
        return db

    def _in_memory(self) -> sqlite3.Connection:
        self.memory = True
        db = sqlite3.connect(":memory:", check_same_thread=False)
        db.execute("CREATE TABLE vectors (key BLOB PRIMARY KEY, v BLOB) WITHOUT ROWID")
        return db

    def _replace(self, exc: BaseException) -> sqlite3.Connection:
        """The cache file is damaged or not a vector cache: named, set aside (``.damaged``, never deleted) and
        made again empty, so its vectors are encoded again; never served, never an internal error."""
        what = "not a vector cache" if "not a database" in str(exc) else "damaged"
        # A name of its own each time, reserved atomically (O_EXCL): no second event, in this process or another,
        # overwrites the first copy.
        stamp = time.strftime("%Y%m%dT%H%M%S")
        n = 0
        while True:
            n += 1
            aside = self.path.with_name(f"{self.FILE}.damaged-{stamp}" + (f"-{n}" if n > 1 else ""))
            try:
                os.close(os.open(aside, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
                break
            except FileExistsError:
                continue
            except OSError:
                break  # the folder cannot be written: the move below fails and says so
        log.warning(
            "wetqa: warning: the vector cache %s is %s (%s): set aside as %s and made again (its vectors are "
            "encoded again)", self.path, what, _one_line(exc), aside.name,
        )  # fmt: skip
        old = getattr(self, "db", None)
        if old is not None:
            old.close()
        self._generation += 1
        try:
            self.path.replace(aside)
            for suffix in ("-wal", "-shm"):
                side = self.path.with_name(self.FILE + suffix)
                if side.exists():
                    side.replace(aside.with_name(aside.name + suffix))
            return self._open()
        except (OSError, sqlite3.DatabaseError) as again:
            log.warning("wetqa: warning: the vector cache %s cannot be made again (%s): vectors kept in memory",
                        self.path, _one_line(again))  # fmt: skip
            return self._in_memory()

    def _migrate(self, meta_path: Path) -> None:
        """A cache of an older wetqa, whose rows hold no checksum: checked once by SQLite (quick_check: set
        aside when damaged), then each row given its checksum, so no row is ever served unchecked after."""
        from wetqa.io import write_json

        size = 4 * self.dim
        with self.lock:
            try:
                verdict = self.db.execute("PRAGMA quick_check").fetchone()[0]
                if verdict != "ok":
                    raise sqlite3.DatabaseError(f"quick_check: {verdict.splitlines()[0]}")
                # In slices of rows by key, each its own transaction: a cache of gigabytes is never held whole.
                last = b""
                while True:
                    rows = self.db.execute(
                        "SELECT key, v FROM vectors WHERE key > ? ORDER BY key LIMIT 5000", (last,)
                    ).fetchall()
                    if not rows:
                        break
                    last = rows[-1][0]
                    self.db.executemany("UPDATE vectors SET v = ? WHERE key = ?",
                                        [(_packed(np.frombuffer(v, dtype=np.float32)), k) for k, v in rows
                                         if len(v) == size])  # fmt: skip
                    self.db.commit()
            except sqlite3.DatabaseError as exc:
                if not _damaged(exc) and not str(exc).startswith("quick_check"):
                    self.db.rollback()  # busy now, say: checked by the next process that opens it
                    log.warning("wetqa: warning: the vector cache %s could not be checked now (%s)", self.path,
                                _one_line(exc))  # fmt: skip
                    return
                self.db = self._replace(exc)  # a new file: every row it holds will have its checksum
        meta = json.loads(meta_path.read_text(encoding="utf-8"))
        write_json(meta_path, {**meta, "format": FORMAT})

    def _take_over_legacy(self) -> None:
        keys_path, vec_path = self.folder / "keys.txt", self.folder / "vectors.f32"
        if not keys_path.is_file():
            return
        keys = keys_path.read_text(encoding="utf-8").split("\n")[:-1]
        raw = vec_path.read_bytes() if vec_path.is_file() else b""
        n = min(len(keys), len(raw) // (4 * self.dim))  # records both files hold (an interrupted append)
        size = 4 * self.dim
        rows = (
            (bytes.fromhex(keys[i]), _packed(np.frombuffer(raw[i * size : (i + 1) * size], dtype=np.float32)))
            for i in range(n)
        )  # each row given its checksum as it is taken over
        with self.lock:
            self.db.executemany("INSERT OR REPLACE INTO vectors VALUES (?, ?)", rows)
            self.db.commit()
        keys_path.unlink()  # wetqa's own files, now in vectors.sqlite
        vec_path.unlink(missing_ok=True)

    def __len__(self) -> int:
        with self.lock:
            try:
                return int(self.db.execute("SELECT count(*) FROM vectors").fetchone()[0])
            except sqlite3.DatabaseError as exc:
                if _damaged(exc):
                    self.db = self._replace(exc)
                return 0

    def _reader(self) -> sqlite3.Connection:
        if self.memory:
            return self.db
        db, generation = getattr(self._readers, "db", None), getattr(self._readers, "generation", -1)
        if db is None or generation != self._generation:
            db = sqlite3.connect(self.path, timeout=60, check_same_thread=False)
            self._readers.db, self._readers.generation = db, self._generation
        return db

    def _lookup(self, keys: list[bytes]) -> dict[bytes, np.ndarray]:
        """The cached vectors of these keys that check (a row whose bytes changed is left out: encoded again);
        a cache file SQLite calls damaged is set aside and made again."""
        found: dict[bytes, np.ndarray] = {}
        generation = self._generation
        try:
            for start in range(0, len(keys), 500):
                part = keys[start : start + 500]
                sql = f"SELECT key, v FROM vectors WHERE key IN ({','.join('?' * len(part))})"
                with self.lock if self.memory else _NO_LOCK:
                    rows = self._reader().execute(sql, part).fetchall()
                for k, v in rows:
                    vector = _unpacked(v, self.dim)
                    if vector is not None:
                        found[k] = vector
        except sqlite3.DatabaseError as exc:
            with self.lock:
                if self.memory:
                    pass
                elif not _damaged(exc):  # busy or unreadable now: these texts are encoded, the file left as it is
                    log.warning("wetqa: warning: the vector cache %s cannot be read now (%s)", self.path, exc)
                elif generation == self._generation:  # not set aside already by another thread
                    self.db = self._replace(exc)
            return {}
        return found

    def vectors(
        self, texts: Sequence[str], encoder: PassageEncoder, progress: bool = False, slice_size: int | None = None
    ) -> np.ndarray:
        """The texts' vectors: read from the cache, the missing ones encoded (``slice_size`` per model call;
        default all in one, as index builds want them).

        No lock is held while a model runs: a lookup of cached vectors never waits for another request's
        encoding, and a text another request is encoding now is waited for, not encoded twice.
        """
        keys = [_key(t) for t in texts]
        if not keys:
            return np.zeros((0, self.dim), dtype=np.float32)
        found = self._lookup(list(dict.fromkeys(keys)))
        # One row per distinct text: two articles may hold the same text ("Vervallen").
        missing: dict[bytes, str] = {}
        for k, t in zip(keys, texts):
            if k not in found:
                missing.setdefault(k, t)
        if missing:
            found.update(self._encode_missing(missing, encoder, progress, slice_size))
        return np.stack([found[k] for k in keys])

    def _encode_missing(
        self, missing: dict[bytes, str], encoder: PassageEncoder, progress: bool, slice_size: int | None
    ) -> dict[bytes, np.ndarray]:
        with self._encoding_lock:
            mine = [k for k in missing if k not in self._encoding]
            theirs = {k: self._encoding[k] for k in missing if k in self._encoding}
            for k in mine:
                self._encoding[k] = Future()
        out: dict[bytes, np.ndarray] = {}
        if slice_size:
            # Slices of similar lengths: a model call pads every text to its slice's longest (a question's
            # 20 candidates in rank order mix short articles with long ones).
            mine.sort(key=lambda k: len(missing[k]))
        try:
            step = slice_size or max(1, len(mine))
            for start in range(0, len(mine), step):
                part = mine[start : start + step]
                texts = [missing[k] for k in part]
                fresh = np.ascontiguousarray(encoder.encode_passages(texts, progress=progress), dtype=np.float32)
                self._store(part, fresh)
                out.update(zip(part, fresh))
                self._settle(part, fresh)
        except BaseException as exc:
            self._settle([k for k in mine if k not in out], error=exc)
            raise
        failed = {}
        for k, future in theirs.items():
            try:
                out[k] = future.result()
            except BaseException:  # noqa: BLE001 - that request's failure: this one encodes the text itself
                failed[k] = missing[k]
        if failed:
            out.update(self._encode_missing(failed, encoder, progress, slice_size))
        return out

    def _store(self, keys: list[bytes], vectors: np.ndarray) -> None:
        rows = [(k, _packed(v)) for k, v in zip(keys, vectors)]
        with self.lock:
            try:
                self.db.executemany("INSERT OR REPLACE INTO vectors VALUES (?, ?)", rows)
                self.db.commit()
            except sqlite3.DatabaseError as exc:
                if self.memory:
                    raise
                if not _damaged(exc):  # busy, full, unreadable: the vectors are served, not kept; the file stays
                    self.db.rollback()
                    log.warning("wetqa: warning: the vector cache %s cannot be written now (%s): %d vectors not kept",
                                self.path, exc, len(rows))  # fmt: skip
                    return
                self.db = self._replace(exc)
                self.db.executemany("INSERT OR REPLACE INTO vectors VALUES (?, ?)", rows)
                self.db.commit()

    def _settle(self, keys: list[bytes], vectors: np.ndarray | None = None, error: BaseException | None = None) -> None:
        """Hand encoded vectors (or the error) to the requests waiting for them."""
        with self._encoding_lock:
            futures = [self._encoding.pop(k) for k in keys]
        for i, future in enumerate(futures):
            if vectors is not None:
                future.set_result(vectors[i])
            else:
                future.set_exception(error if isinstance(error, Exception) else RuntimeError("encoding interrupted"))


class _NoLock:
    def __enter__(self):
        return None

    def __exit__(self, *exc):
        return False


_NO_LOCK = _NoLock()


def model_identity(model: str) -> str:
    """A model as the cache knows it: a local folder by its absolute path, anything else by its name."""
    path = Path(model).expanduser()
    return str(path.resolve()) if path.exists() else model


def weights_identity(model: str) -> str | None:
    """What a model folder's weights are: their size and ends (as the ONNX export records them) and, for a model
    wetqa trained, its training manifest (each run its own: fine-tuning the middle layers leaves the ends as
    they were). None for a model that is not a folder here."""
    path = Path(model).expanduser()
    if not (path / "model.safetensors").is_file():
        return None
    from .layout import source_identity

    ident = source_identity(path)
    manifest = path / "wetqa-model.json"
    try:
        trained = json.loads(manifest.read_text(encoding="utf-8")).get("kind") == "wetqa-trained-reader"
    except (OSError, ValueError, AttributeError):
        trained = False
    if trained:
        ident += "+" + hashlib.sha256(manifest.read_bytes()).hexdigest()[:16]
    return ident


def cache_for(model: str, dim: int, variant: str = "") -> EmbeddingCache:
    """The shared passage-vector cache of a model (and of its passage graph's ``variant``: the int8 graph's
    vectors are not the float32 graph's), under ``$WETQA_CACHE/embeddings``."""
    from wetqa.home import cache_root

    from .content import content_identity

    ident = model_identity(model) + (f"#{variant}" if variant else "")
    root = cache_root() / "embeddings"
    by_path = root / hashlib.sha1(ident.encode()).hexdigest()[:16]
    content = content_identity(model)
    if content is None:  # a model by its hub id: the name is all there is
        return EmbeddingCache(by_path, ident, dim, weights=weights_identity(model))
    # A model folder's cache is keyed by what the folder holds, never by its path: a copy elsewhere shares it, a
    # damaged model's vectors land apart and the repaired model finds its own again. A cache an older wetqa kept
    # by the folder's path is not taken over: it may hold the vectors of a model damaged then (issue 55), and
    # nothing tells them apart; its texts are read again once.
    keyed = f"content:{content}" + (f"#{variant}" if variant else "")
    folder = root / hashlib.sha1(keyed.encode()).hexdigest()[:16]
    return EmbeddingCache(folder, keyed, dim, weights=weights_identity(model), content=content)


def cache_of(model: str, encoder) -> EmbeddingCache:
    """The cache of the passage vectors ``encoder`` makes for ``model``."""
    return cache_for(model, encoder.dim, encoder.passage_variant)


def best_cosines(
    cache: EmbeddingCache, encoder, groups: Sequence[Sequence[str]], queries: np.ndarray, slice_size: int | None = None
) -> np.ndarray:
    """Each group's best passage cosine with each query, (queries, groups): an article is as near a question as
    its nearest chunk. The passages' vectors through the cache (encoded once per text, ``slice_size`` a call);
    an empty group scores -1. The one dense path of a ranking: the learned ranking's candidates and the
    re-scoring of another retriever's hits both read it."""
    queries = np.asarray(queries, dtype=np.float32).reshape(-1, cache.dim)
    out = np.full((len(queries), len(groups)), -1.0, dtype=np.float32)
    flat = [t for g in groups for t in g]
    if not flat:
        return out
    cos = cache.vectors(flat, encoder, slice_size=slice_size) @ queries.T
    at = 0
    for i, g in enumerate(groups):
        if len(g):
            out[:, i] = cos[at : at + len(g)].max(axis=0)
        at += len(g)
    return out
