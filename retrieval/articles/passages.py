"""Every passage's vector in the index: the dense first stage, so that a question in words the law does
not use still finds its article (BM25 alone chooses only what shares the question's words).

``wetqa index --rescore MODEL --precompute`` encodes every chunk (through the model's vector cache,
so a rebuild encodes only new text) and writes them here as float16 rows, grouped by cluster
(an inverted file, IVF: k-means centroids over the vectors, each row in its nearest centroid's run).
A question scans the runs of its ``nprobe`` nearest centroids, reading a few percent of the rows of a
large index (memory-mapped: a process touches only those pages); an index under ``EXACT_BELOW`` rows
has one run, scanned whole, which is exact. Each article scores its best chunk's cosine; a scope's
mask leaves out the chunks of articles outside it. Also kept: each ranked article's *place* vector
(its law's title, its Boek / Titel / Afdeling and heading), read for the candidates of a question.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from .._base import DamagedIndex

VECTORS = "passages.f16.npy"
POSITIONS = "passages.ivf.npz"
META = "passages.json"
PLACES = "places.f16.npy"
EXACT_BELOW = 50_000  # rows: one run, scanned whole (exact); above, a scan would read tens of MB a question
ROWS_PER_CLUSTER = 256
NPROBE = 48
_BLOCK = 16_384  # rows converted to float32 at a time
WARM_BYTES = 512 * 2**20  # a server's float32 copy of the rows: the whole BWB's formal laws, 134 MB
NARROW_SCOPE = 0.25  # a scope allowing fewer of the articles than this is searched exactly, not by the IVF


def place_text(law: str, path_label: str, title: str = "") -> str:
    """What the place vector encodes: the law and where in it an article stands."""
    return ". ".join(x for x in (law, path_label, title) if x)


def kmeans(sample: np.ndarray, k: int, iterations: int = 8, seed: int = 0) -> np.ndarray:
    """Spherical k-means (cosine) over L2-normalised rows: k unit centroids."""
    rng = np.random.default_rng(seed)
    centroids = sample[rng.choice(len(sample), k, replace=False)].copy()
    for _ in range(iterations):
        assign = np.argmax(sample @ centroids.T, axis=1)
        for c in range(k):
            members = sample[assign == c]
            if len(members):
                v = members.sum(0)
                centroids[c] = v / (np.linalg.norm(v) or 1.0)
    return centroids.astype(np.float32)


def write_passages(
    folder: Path,
    vectors_of,
    n_rows: int,
    dim: int,
    model: str,
    places: np.ndarray,
    chunk_rows: np.ndarray | None = None,
    extra: dict | None = None,
) -> dict:
    """Write the passage vectors (``vectors_of(start, end)`` gives rows in chunk order) grouped by
    cluster, and the articles' place vectors. ``chunk_rows``: the chunk row of each vector when only some
    chunks have one (ascending; the others' place rows are zeros); None: every chunk, in order. Memory:
    one block of rows and a sample at a time."""
    tmp = folder / (VECTORS + ".tmp")
    raw = np.lib.format.open_memmap(tmp, mode="w+", dtype=np.float16, shape=(n_rows, dim))
    for start in range(0, n_rows, _BLOCK):
        raw[start : start + _BLOCK] = vectors_of(start, min(start + _BLOCK, n_rows))
    raw.flush()
    n_clusters = 1 if n_rows < EXACT_BELOW else max(2, n_rows // ROWS_PER_CLUSTER)
    if n_clusters == 1:
        assign = np.zeros(n_rows, dtype=np.int32)
        centroids = np.zeros((1, dim), dtype=np.float32)
    else:
        rng = np.random.default_rng(0)
        sample = np.asarray(raw[np.sort(rng.choice(n_rows, min(n_rows, 40 * n_clusters), replace=False))], np.float32)
        centroids = kmeans(sample, n_clusters)
        assign = np.empty(n_rows, dtype=np.int32)
        for start in range(0, n_rows, _BLOCK):
            block = np.asarray(raw[start : start + _BLOCK], dtype=np.float32)
            assign[start : start + _BLOCK] = np.argmax(block @ centroids.T, axis=1)
    order = np.argsort(assign, kind="stable")  # position -> chunk row, runs of one cluster
    offsets = np.zeros(n_clusters + 1, dtype=np.int64)
    np.cumsum(np.bincount(assign, minlength=n_clusters), out=offsets[1:])
    out = np.lib.format.open_memmap(folder / VECTORS, mode="w+", dtype=np.float16, shape=(n_rows, dim))
    for start in range(0, n_rows, _BLOCK):
        out[start : start + _BLOCK] = raw[np.sort(order[start : start + _BLOCK])][
            np.argsort(np.argsort(order[start : start + _BLOCK]))
        ]
    out.flush()
    del raw, out
    tmp.unlink()
    if chunk_rows is not None:
        order = np.asarray(chunk_rows, dtype=np.int64)[order]  # position -> the chunk row it is the vector of
    np.savez(folder / POSITIONS, centroids=centroids, offsets=offsets, order=order.astype(np.int64))
    np.save(folder / PLACES, places.astype(np.float16))
    meta = {"model": model, "dim": dim, "rows": n_rows, "clusters": n_clusters, "nprobe": min(NPROBE, n_clusters)}
    if chunk_rows is not None:
        meta |= {"partial": True, **(extra or {})}
    (folder / META).write_text(json.dumps(meta) + "\n", encoding="utf-8")
    return meta


def _best_of(best: np.ndarray, depth: int) -> tuple[np.ndarray, np.ndarray]:
    """The ``depth`` articles of highest score (ties by article), best first, and their scores; -2 is none.
    Only the candidates at or above the depth-th score are sorted (a full sort of 60,000 took 12 ms)."""
    found = np.flatnonzero(best > -2.0)
    if len(found) > depth:
        values = best[found]
        kth = np.partition(values, len(values) - depth)[len(values) - depth]  # the depth-th highest
        found = found[values >= kth]
    top = found[np.lexsort((found, -best[found]))[:depth]]
    return top, best[top]


class PassageVectors:
    """The passage and place vectors of an index (opened in O(1): the arrays are memory-mapped)."""

    def __init__(self, folder: Path, meta: dict, chunk_article: np.ndarray, n_articles: int):
        self.meta = meta
        self.vectors = np.load(folder / VECTORS, mmap_mode="r")
        ivf = np.load(folder / POSITIONS)
        self.centroids, self.offsets, self.order = ivf["centroids"], ivf["offsets"], ivf["order"]
        self.places = np.load(folder / PLACES, mmap_mode="r")
        self.chunk_article = chunk_article
        self.n_articles = n_articles
        self._position: np.ndarray | None = None
        self._held_articles: np.ndarray | None = None
        self._rows32: np.ndarray | None = None  # set by warm(): the rows as float32, in memory
        rows = int(meta["rows"])
        self.partial = bool(meta.get("partial"))
        whole = len(chunk_article) == rows or (self.partial and len(chunk_article) >= rows)
        if self.vectors.shape != (rows, int(meta["dim"])) or len(self.order) != rows or not whole:
            raise DamagedIndex(folder, f"its passage vectors do not match its {len(chunk_article)} chunks")
        if len(self.places) != n_articles or int(self.offsets[-1]) != rows:
            raise DamagedIndex(folder, "its place vectors or clusters do not match its articles")

    @classmethod
    def load(cls, folder: Path, chunk_article: np.ndarray, n_articles: int) -> PassageVectors | None:
        if not (folder / META).is_file():
            return None
        try:
            meta = json.loads((folder / META).read_text(encoding="utf-8"))
            return cls(folder, meta, chunk_article, n_articles)
        except (OSError, ValueError, KeyError) as exc:
            raise DamagedIndex(folder, f"its passage vectors are not readable ({exc})") from None

    @property
    def position(self) -> np.ndarray:
        """Chunk row -> its row in the clustered vectors, -1 for a chunk without one (built when first
        needed)."""
        if self._position is None:
            position = np.full(len(self.chunk_article), -1, dtype=np.int64)
            position[self.order] = np.arange(len(self.order))
            self._position = position
        return self._position

    def warm(self) -> None:
        """For a long-lived process (a server): the rows kept as float32 in memory (when they take at most
        WARM_BYTES), so a question's scan and its candidates' cosines are products, not conversions from
        float16 (most of their time: 8 ms of a whole-BWB question's 53). A one-question process never
        pays for it."""
        if self._rows32 is None and self.vectors.shape[0] * self.vectors.shape[1] * 4 <= WARM_BYTES:
            self._rows32 = np.asarray(self.vectors, dtype=np.float32)

    @property
    def _rows(self) -> np.ndarray:
        """The rows to read: the float32 copy once warm, else the memory-mapped float16 ones."""
        return self._rows32 if self._rows32 is not None else self.vectors

    def top_articles(self, query: np.ndarray, depth: int, allowed: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
        """The ``depth`` articles whose best chunk is nearest the query (of those ``allowed``), best first,
        with that cosine."""
        return self.top_articles_of(np.asarray(query)[None, :], depth, allowed)[0]

    def top_articles_of(
        self, queries: np.ndarray, depth: int, allowed: np.ndarray | None
    ) -> list[tuple[np.ndarray, np.ndarray]]:
        """:meth:`top_articles` of several queries (a question and its expanded question) in one pass: each
        block of rows is read and converted from float16 once for all of them (the conversion, not the
        product, is most of a scan's time), and each query keeps only the clusters it probes, so every
        ranking is the one it would have alone."""
        queries = np.asarray(queries, dtype=np.float32)
        if allowed is not None and self._share(allowed) < NARROW_SCOPE:  # also one run: read only the scope's rows
            return [self._top_in(q, depth, allowed) for q in queries]
        n_clusters = len(self.centroids)
        probes = np.ones((len(queries), n_clusters), dtype=bool)
        if n_clusters > 1:
            nprobe = int(self.meta.get("nprobe", NPROBE))
            probes[:] = False
            for i, q in enumerate(queries):
                probes[i, np.argpartition(-(self.centroids @ q), nprobe - 1)[:nprobe]] = True
        best = np.full((len(queries), self.n_articles), -2.0, dtype=np.float32)
        source = self._rows
        for c in np.flatnonzero(probes.any(axis=0)):
            which = np.flatnonzero(probes[:, c]).tolist()
            first, last = int(self.offsets[c]), int(self.offsets[c + 1])
            # The same blocks warm or cold: BLAS may round a row's product differently by where the row
            # stands in the matrix, and a server ranks as a one-question process does.
            for start in range(first, last, _BLOCK):
                end = min(start + _BLOCK, last)
                rows = np.asarray(source[start:end], np.float32)
                arts = np.asarray(self.chunk_article[self.order[start:end]])
                live = arts >= 0
                for query_row in which:
                    # One matrix-vector product per query: BLAS's matrix-matrix path is slower for two columns.
                    np.maximum.at(best[query_row], arts[live], (rows @ queries[query_row])[live])
        out = []
        for row in best:
            if allowed is not None:
                row[~allowed] = -2.0
            out.append(_best_of(row, depth))
        return out

    def _share(self, allowed: np.ndarray) -> float:
        """The share of the articles with vectors here that a scope allows (of a partial set: of its own
        articles, so that a scope wide over all of them but narrow over these is searched exactly)."""
        if not self.partial:
            return float(allowed.mean())
        if self._held_articles is None:
            arts = np.unique(np.asarray(self.chunk_article)[self.order])
            self._held_articles = arts[arts >= 0]
        return float(allowed[self._held_articles].mean()) if len(self._held_articles) else 0.0

    def _top_in(self, query: np.ndarray, depth: int, allowed: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Exact over the chunks of the allowed articles: a narrow scope (a few laws, a date) would find too
        few of its articles in the probed clusters."""
        chunk_article = np.asarray(self.chunk_article)
        live = chunk_article >= 0
        rows = np.flatnonzero(live & allowed[np.where(live, chunk_article, 0)])
        if self.partial:
            rows = rows[self.position[rows] >= 0]
        best = np.full(self.n_articles, -2.0, dtype=np.float32)
        positions = self.position[rows]
        order = np.argsort(positions)  # read the memory-mapped rows in file order
        source = self._rows
        for start in range(0, len(rows), _BLOCK):
            part = order[start : start + _BLOCK]
            cos = np.asarray(source[positions[part]], dtype=np.float32) @ query
            np.maximum.at(best, chunk_article[rows[part]], cos)
        return _best_of(best, depth)

    def article_cosines(self, query: np.ndarray, rows_of: Sequence[range]) -> np.ndarray:
        """Each article's best chunk cosine (its chunk rows given), exact; -1 for an article without chunks,
        NaN for one whose chunks have no vector here (a partial set: they go through the vector cache)."""
        return self.article_cosines_of(np.asarray(query)[None, :], rows_of)[0]

    def article_cosines_of(self, queries: np.ndarray, rows_of: Sequence[range]) -> np.ndarray:
        """:meth:`article_cosines` of several queries (a question and its expanded question), one row each:
        the articles' rows are read and converted once for all of them."""
        queries = np.asarray(queries, dtype=np.float32)
        out = np.full((len(queries), len(rows_of)), -1.0, dtype=np.float32)
        if self.partial:
            held = np.asarray([len(r) == 0 or self.position[r.start] >= 0 for r in rows_of], dtype=bool)
            out[:, ~held] = np.nan
            rows_of = [r if h else range(0) for r, h in zip(rows_of, held)]
        sizes = np.asarray([len(r) for r in rows_of], dtype=np.int64)
        if not sizes.sum():
            return out
        rows = np.concatenate([np.arange(r.start, r.stop) for r in rows_of])
        where = self.position[rows]
        ascending = np.argsort(where)  # read the memory map in order
        source = self._rows
        read = np.asarray(source[where[ascending]], dtype=np.float32)
        cos = np.empty((len(rows), len(queries)), dtype=np.float32)
        for j, q in enumerate(queries):  # one matrix-vector product each: the values a query alone gets
            cos[ascending, j] = read @ q
        full = sizes > 0
        starts = np.concatenate([[0], np.cumsum(sizes)[:-1]])[full]
        out[:, full] = np.maximum.reduceat(cos, starts, axis=0).T
        return out

    def place_cosines(self, query: np.ndarray, articles: Sequence[int]) -> np.ndarray:
        """Each article's place cosine; NaN for one without a place vector here (a partial set)."""
        idx = np.asarray(articles, dtype=np.int64)
        order = np.argsort(idx)
        rows = np.asarray(self.places[idx[order]], dtype=np.float32)
        out = np.empty(len(idx), dtype=np.float32)
        out[order] = rows @ query
        if self.partial:
            missing = np.empty(len(idx), dtype=bool)
            missing[order] = ~rows.any(axis=1)  # a place vector is never all zeros: not encoded
            out[missing] = np.nan
        return out
