"""An index's chunks and articles on disk, read by row or id: opening it reads one page.

Why SQLite: the records are text of every length, read a few at a time by position (the hits of a
question) or by stable id (a citation, the page's source view); SQLite gives both through B-trees
that the page cache serves, opens in O(1), needs no server, is in the standard library, and a
reader never sees a half-written file (the index folder is swapped in whole). The numbers that are
scanned (BM25 impacts, chunk->article maps, vectors) are numpy arrays memory-mapped beside it.

Layout: ``articles`` (every article of the corpus, in corpus order: its law, label, headings,
paragraphs, and the range of its chunks), ``chunks`` (in corpus order: the row is the position a
retriever ranks), ``terms`` (the vocabulary of the BM25 views) and ``meta`` (format, corpus hash,
counts: checked against ``index.json`` when opened).
"""

from __future__ import annotations

import json
import sqlite3
import threading
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Protocol, runtime_checkable

from wetqa.corpus.records import DEFAULT_COLLECTION, Chunk

from .._base import DamagedIndex, RetrievalError

STORE = "store.sqlite"
STORE_FORMAT = 3  # 3: articles name their collection and document generically (collection, law_id)
_CHUNK_COLUMNS = (
    "c.row, c.id, c.doc_id, a.law_id, a.version_date, a.law, a.article, c.part, c.text, c.search_text, "
    "a.expired, a.path_label, a.kind, a.jurisdiction, a.valid_until, a.unit, a.collection"
)
_SCHEMA = """
CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT) WITHOUT ROWID;
CREATE TABLE articles (
    row INTEGER PRIMARY KEY, law_id TEXT, version_date TEXT, law TEXT, article TEXT, number TEXT, title TEXT,
    path_label TEXT, expired INTEGER, paragraphs TEXT, first_chunk INTEGER, n_chunks INTEGER,
    kind TEXT, jurisdiction TEXT, valid_until TEXT, unit TEXT, collection TEXT
);
CREATE TABLE chunks (
    row INTEGER PRIMARY KEY, id TEXT, doc_id TEXT, article_row INTEGER, part INTEGER, text TEXT, search_text TEXT
);
CREATE TABLE terms (term TEXT PRIMARY KEY, id INTEGER) WITHOUT ROWID;
"""


def corpus_articles(corpus_dir: Path) -> Iterator[tuple[dict, list[Chunk]]]:
    """Each article of a corpus with its chunks, in corpus order, read as a stream.

    ``chunks.jsonl`` holds the chunks of ``articles.jsonl``'s articles in the same order (an article
    that has none, e.g. an expired one under ``structured`` chunking, is passed with an empty list).
    """
    from wetqa.corpus.build import ARTICLES, CHUNKS
    from wetqa.corpus.sources import law_id_of
    from wetqa.io import read_jsonl

    for name in (ARTICLES, CHUNKS):
        if not (corpus_dir / name).is_file():
            raise RetrievalError(
                f"{corpus_dir} is not a complete corpus (no {name}); build it with `wetqa corpus build`"
            )

    chunks = (Chunk.from_json(row) for row in read_jsonl(corpus_dir / CHUNKS))
    pending = next(chunks, None)
    for article in read_jsonl(corpus_dir / ARTICLES):
        if "law_id" not in article:  # a corpus built before records named it so
            article["law_id"] = law_id_of(article)
        key = (article["law_id"], article["version_date"], article["article"])
        own: list[Chunk] = []
        while pending is not None and (pending.law_id, pending.version_date, pending.article) == key:
            own.append(pending)
            pending = next(chunks, None)
        yield article, own
    if pending is not None:
        raise RetrievalError(
            f"{corpus_dir}: chunk {pending.id} belongs to no article in corpus order; "
            "rebuild the corpus with `wetqa corpus build`"
        )


@runtime_checkable
class ArticleStore(Protocol):
    """A chunk store that knows each chunk's article (:class:`ChunkStore`; a plain list of chunks does not)."""

    def article_of(self, row: int) -> dict: ...

    def rows(self, rows: Iterable[int]) -> list[Chunk]: ...


class StoreWriter:
    """Writes a store in one transaction; ``add`` returns the rows it gave the article and its chunks."""

    def __init__(self, path: Path):
        self.path = path
        self.db = sqlite3.connect(path)
        self.db.executescript("PRAGMA journal_mode=OFF; PRAGMA synchronous=OFF;" + _SCHEMA)
        self.n_articles = self.n_chunks = 0
        self._articles: list[tuple] = []
        self._chunks: list[tuple] = []

    def add(self, article: dict, chunks: Sequence[Chunk]) -> tuple[int, range]:
        row = self.n_articles
        first = self.n_chunks
        paragraphs = article.get("paragraphs") or [article.get("text", "")]  # older corpora: the text as one
        self._articles.append(
            (
                row,
                article["law_id"],
                article["version_date"],
                article["law"],
                article["article"],
                article.get("number", ""),
                article.get("title") or "",
                article.get("path_label") or "",
                int(bool(article.get("expired"))),
                json.dumps(paragraphs, ensure_ascii=False),
                first,
                len(chunks),
                article.get("kind") or "",
                article.get("jurisdiction") or "nl",
                article.get("valid_until") or "",
                article.get("unit") or "artikel",
                article.get("collection") or DEFAULT_COLLECTION,
            )
        )
        for i, c in enumerate(chunks):
            self._chunks.append((first + i, c.id, c.doc_id, row, c.part, c.text, c.search_text or None))
        self.n_articles += 1
        self.n_chunks += len(chunks)
        if len(self._chunks) >= 5000 or len(self._articles) >= 5000:
            self._flush()
        return row, range(first, first + len(chunks))

    def _flush(self) -> None:
        self.db.executemany("INSERT INTO articles VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)", self._articles)
        self.db.executemany("INSERT INTO chunks VALUES (?,?,?,?,?,?,?)", self._chunks)
        self._articles.clear()
        self._chunks.clear()

    def add_terms(self, terms: Iterable[tuple[str, int]]) -> None:
        self.db.executemany("INSERT INTO terms VALUES (?,?)", terms)

    def finish(self, meta: dict) -> None:
        self._flush()
        self.db.execute("CREATE INDEX chunk_id ON chunks(id)")
        full = {**meta, "format": STORE_FORMAT, "chunks": self.n_chunks, "articles": self.n_articles}
        self.db.executemany("INSERT INTO meta VALUES (?,?)", [(k, json.dumps(v)) for k, v in full.items()])
        self.db.commit()
        self.db.close()


def _chunk(r: tuple) -> Chunk:
    return Chunk(
        r[1],
        r[2],
        r[3],
        r[4],
        r[5],
        r[6],
        r[7],
        r[8],
        r[9] or "",
        bool(r[10]),
        r[11],
        r[12],
        r[13],
        r[14],
        r[15],
        r[16] or DEFAULT_COLLECTION,
    )


class ChunkStore(Sequence[Chunk]):
    """The chunks of an index as a sequence (``store[row]``), with lookups by id and by article.

    Each thread reads through its own read-only connection; nothing is held in memory but what was asked.
    """

    def __init__(self, path: Path, expect: dict | None = None):
        self.path = path
        if not path.is_file():
            raise DamagedIndex(path.parent, f"{path.name} is missing")
        self._local = threading.local()
        try:
            meta = {k: json.loads(v) for k, v in self._db().execute("SELECT key, value FROM meta")}
        except sqlite3.DatabaseError as exc:
            raise DamagedIndex(path.parent, f"{path.name} cannot be read ({exc})") from None
        self.meta = meta
        if meta.get("format") != STORE_FORMAT:
            raise RetrievalError(
                f"{path.parent}: its {path.name} is of format {meta.get('format')!r}, this wetqa reads "
                f"{STORE_FORMAT}; rebuild the index with `wetqa index --force --out {path.parent}`"
            )
        for key, value in (expect or {}).items():
            if meta.get(key) != value:
                raise DamagedIndex(
                    path.parent,
                    f"{path.name} records {key} {meta.get(key)!r}, index.json {value!r} (another corpus or build)",
                )
        self._n = int(meta.get("chunks", 0))

    def _db(self) -> sqlite3.Connection:
        db = getattr(self._local, "db", None)
        if db is None:
            # immutable: the file never changes while an index is open (a rebuild swaps the folder).
            db = sqlite3.connect(f"file:{self.path}?mode=ro&immutable=1", uri=True, check_same_thread=False)
            self._local.db = db
        return db

    def _query(self, sql: str, args: Sequence = ()) -> list[tuple]:
        try:
            return self._db().execute(sql, tuple(args)).fetchall()
        except sqlite3.DatabaseError as exc:
            raise DamagedIndex(self.path.parent, f"{self.path.name} ({exc})") from None

    def __len__(self) -> int:
        return self._n

    def __getitem__(self, row):  # type: ignore[override]
        if isinstance(row, slice):
            return self.rows(range(*row.indices(self._n)))
        row = int(row)
        if row < 0:
            row += self._n
        if not 0 <= row < self._n:
            raise IndexError(row)
        return self.rows([row])[0]

    def rows(self, rows: Iterable[int]) -> list[Chunk]:
        """The chunks at these rows, in the order given."""
        rows = [int(r) for r in rows]
        if not rows:
            return []
        found: dict[int, Chunk] = {}
        for start in range(0, len(rows), 500):
            part = rows[start : start + 500]
            sql = (
                f"SELECT {_CHUNK_COLUMNS} FROM chunks c JOIN articles a ON a.row = c.article_row "
                f"WHERE c.row IN ({','.join('?' * len(part))})"
            )
            found.update((r[0], _chunk(r)) for r in self._query(sql, part))
        missing = [r for r in rows if r not in found]
        if missing:
            raise DamagedIndex(self.path.parent, f"chunk row {missing[0]} is missing from {self.path.name}")
        return [found[r] for r in rows]

    def __iter__(self) -> Iterator[Chunk]:
        try:
            cur = self._db().execute(
                f"SELECT {_CHUNK_COLUMNS} FROM chunks c JOIN articles a ON a.row = c.article_row ORDER BY c.row"
            )
            for r in cur:
                yield _chunk(r)
        except sqlite3.DatabaseError as exc:
            raise DamagedIndex(self.path.parent, f"{self.path.name} ({exc})") from None

    def row_of(self, chunk_id: str) -> int | None:
        found = self._query("SELECT row FROM chunks WHERE id = ? ORDER BY row LIMIT 1", [chunk_id])
        return found[0][0] if found else None

    def by_id(self, chunk_id: str) -> Chunk | None:
        row = self.row_of(chunk_id)
        return None if row is None else self.rows([row])[0]

    def article_of(self, row: int) -> dict:
        """The article of the chunk at ``row``: its rows, paragraphs and headings."""
        found = self._query(
            "SELECT a.row, a.first_chunk, a.n_chunks, a.paragraphs, a.title FROM chunks c "
            "JOIN articles a ON a.row = c.article_row WHERE c.row = ?",
            [row],
        )
        if not found:
            raise IndexError(row)
        arow, first, n, paragraphs, title = found[0]
        return {"row": arow, "chunks": range(first, first + n), "paragraphs": json.loads(paragraphs), "title": title}

    def paragraphs(self, article_rows: Iterable[int]) -> list[tuple[str, ...]]:
        rows = [int(r) for r in article_rows]
        if not rows:
            return []
        sql = f"SELECT row, paragraphs FROM articles WHERE row IN ({','.join('?' * len(rows))})"
        found = {r: tuple(json.loads(p)) for r, p in self._query(sql, rows)}
        return [found.get(r, ()) for r in rows]

    def titles(self, article_rows: Iterable[int]) -> list[str]:
        """The headings (kop titles) of the articles at these rows, in the order given."""
        rows = [int(r) for r in article_rows]
        if not rows:
            return []
        sql = f"SELECT row, title FROM articles WHERE row IN ({','.join('?' * len(rows))})"
        found = dict(self._query(sql, rows))
        return [found.get(r) or "" for r in rows]

    def article_versions(self, law_id: str, article: str) -> list[tuple]:
        """Each version of one article: (law_id, law, article, version_date, valid_until, text, expired, place,
        unit, collection)."""
        found = self._query(
            "SELECT law_id, law, article, version_date, valid_until, paragraphs, expired, path_label, unit, collection "
            "FROM articles WHERE law_id = ? AND article = ? COLLATE NOCASE",
            [law_id, article],
        )
        return [
            (b, law, a, day or "", until or "", "\n".join(json.loads(p)), bool(e), place or "", unit or "artikel", c)
            for b, law, a, day, until, p, e, place, unit, c in found
        ]

    def article_rows(self, law_id: str, article: str) -> list[tuple[int, bool, str]]:
        """Each version of one article: (its first chunk's row, expired, valid_until), newest first."""
        found = self._query(
            "SELECT first_chunk, expired, valid_until, version_date FROM articles WHERE law_id = ? AND article = ? "
            "COLLATE NOCASE ORDER BY version_date DESC",
            [law_id, article],
        )
        return [(int(first), bool(e), until or "") for first, e, until, _ in found]

    def law_titles(self) -> list[str]:
        """The titles of the laws in the store."""
        return [r[0] for r in self._query("SELECT DISTINCT law FROM articles")]

    def term_ids(self, terms: Sequence[str]) -> dict[str, int]:
        """The vocabulary ids of the terms that are in it."""
        unique = list(dict.fromkeys(terms))
        if not unique:
            return {}
        out: dict[str, int] = {}
        for start in range(0, len(unique), 500):
            part = unique[start : start + 500]
            out.update(self._query(f"SELECT term, id FROM terms WHERE term IN ({','.join('?' * len(part))})", part))
        return out
