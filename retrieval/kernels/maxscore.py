"""Exact top-k articles without reading every posting: MaxScore over the fused article views.

The article ranking (:mod:`.articles`) fuses three BM25 views, each divided by its best score for the
question. Reading every posting costs time linear in the corpus: at 40 times the shared corpus a
question's terms hold about a million postings, most of them of its common words, and a common word
alone cannot lift an article into the top k. So, as in MaxScore (Turtle & Flood 1995), the largest
impact of every term in every view is kept with the index (``{view}.tmax.npy``), and a question is
answered document at a time (compiled with numba, :mod:`._maxscore_kernels`):

1. each view's maximum: documents in order, a running best; the terms whose largest impacts add up to
   less than the best are *non-essential* (a document holding only them cannot beat it): their
   postings are never walked, only searched (galloping) for the documents the others bring;
2. the top k fused scores: the same, with each term's bound its largest impacts divided by the view
   maxima and weighted as the fusion weighs them, against the k-th best fused score kept.

Every score is added in query order in float32 and fused with the same float32 operations as the
exhaustive path, so the ranking is that path's bit for bit (ties too: articles come in order and a
later equal one never displaces a kept one; a bound prunes only with a margin far above float32
rounding). Tried first and dropped: the same two steps term at a time in numpy (exact, but the
essential terms' postings still cost as much as reading everything), and block-max bounds over
blocks of 128 articles (bounds too loose for BM25 over long questions). Measured in bench/maxscore.py.
"""

from __future__ import annotations

import importlib.util
import json
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from .selection import ImpactIndex

_SLICE = 1 << 22  # postings per step when the maxima are built
VIEWS = ("chunk", "article", "heading")
# A scope of at most this many articles (the laws a question names by subject, a few laws asked for) is
# scored article by article: walking the terms' postings for so few would read them all for nothing.
NARROW_ARTICLES = 2_000
_RECENT_MAXIMA = 4  # a question's searches (question, legal words, laws named by subject) and a spare


def _term_slices(indptr: np.ndarray):
    """Runs of whole terms of about ``_SLICE`` postings (a longer term alone): (first term, end term,
    first posting, end posting), so that a pass over a view holds one slice in memory."""
    n_terms = len(indptr) - 1
    t = 0
    while t < n_terms:
        last = min(max(t + 1, int(np.searchsorted(indptr, indptr[t] + _SLICE, side="right")) - 1), n_terms)
        yield t, last, int(indptr[t]), int(indptr[last])
        t = last


def term_maxima_file(view: str) -> str:
    return f"{view}.tmax.npy"


def write_term_maxima(folder: Path, name: str) -> None:
    """The largest impact of every term in a view (0 for a term it does not hold), read in slices."""
    data = np.load(folder / f"{name}.data.npy", mmap_mode="r")
    indptr = np.load(folder / f"{name}.indptr.npy")
    out = np.zeros(len(indptr) - 1, dtype=np.float32)
    for t, last, a, b in _term_slices(indptr):
        if b > a:
            starts = indptr[t:last] - a
            full = np.flatnonzero(np.diff(indptr[t : last + 1]))  # reduceat needs non-empty segments
            out[t + full] = np.maximum.reduceat(np.asarray(data[a:b]), starts[full])
    np.save(folder / term_maxima_file(name), out)


# Articles per block of the block maxima (bench/maxscore.py: 64 to 512 tried at 40x).
BLOCK = 128
BLOCK_PARTS = ("bptr", "bblock", "bmax")
BLOCKS_META = "blocks.json"


def block_files() -> tuple[str, ...]:
    return (
        (BLOCKS_META,)
        + tuple(f"{v}.{p}.npy" for v in VIEWS for p in BLOCK_PARTS)
        + tuple(term_maxima_file(v) for v in VIEWS)
    )


def chunk_bounds(ranked_first: np.ndarray, n_chunks: int, block: int) -> np.ndarray:
    """First chunk row of each block of articles, and ``n_chunks`` at the end (chunks follow article
    order; block 0 starts at row 0, so chunks of expired articles before the first ranked one are its)."""
    n_blocks = -(-len(ranked_first) // block)
    bounds = np.empty(n_blocks + 1, dtype=np.int64)
    bounds[0] = 0
    bounds[1:n_blocks] = np.asarray(ranked_first[block : n_blocks * block : block])[: n_blocks - 1]
    bounds[n_blocks] = n_chunks
    return bounds


def write_block_maxima(folder: Path, name: str, block_of, live=None) -> None:
    """Per term, the largest impact it has in each block of articles it occurs in (``{name}.bptr``:
    term -> its entries; ``.bblock``: the block, ascending; ``.bmax``: the maximum), read in slices.

    ``block_of`` maps documents to blocks; ``live`` (optional) says which documents count (a chunk of
    an expired article is scored but never ranked, so it does not raise its block's bound).
    """
    data = np.load(folder / f"{name}.data.npy", mmap_mode="r")
    indices = np.load(folder / f"{name}.indices.npy", mmap_mode="r")
    indptr = np.load(folder / f"{name}.indptr.npy")
    n_terms = len(indptr) - 1
    counts = np.zeros(n_terms, dtype=np.int64)
    tmp = {p: folder / f".{name}.{p}.tmp" for p in ("bblock", "bmax")}
    handles = {p: open(path, "wb") for p, path in tmp.items()}
    try:
        for t, last, a, b in _term_slices(indptr):
            if b > a:
                docs = np.asarray(indices[a:b])
                impact = np.asarray(data[a:b])
                if live is not None:
                    impact = np.where(live(docs), impact, np.float32(0))
                term = np.repeat(np.arange(t, last, dtype=np.int64), np.diff(indptr[t : last + 1]))
                blocks = block_of(docs)
                change = np.empty(len(docs), dtype=bool)
                change[0] = True
                change[1:] = (blocks[1:] != blocks[:-1]) | (term[1:] != term[:-1])
                starts = np.flatnonzero(change)
                blocks[starts].astype(np.int32).tofile(handles["bblock"])
                np.maximum.reduceat(impact, starts).astype(np.float32).tofile(handles["bmax"])
                counts[t:last] = np.bincount(term[starts] - t, minlength=last - t)
    finally:
        for h in handles.values():
            h.close()
    bptr = np.zeros(n_terms + 1, dtype=np.int64)
    np.cumsum(counts, out=bptr[1:])
    for part, dtype in (("bblock", np.int32), ("bmax", np.float32)):
        np.save(folder / f"{name}.{part}.npy", np.fromfile(tmp[part], dtype=dtype))
        tmp[part].unlink()
    np.save(folder / f"{name}.bptr.npy", bptr)


def write_bounds(folder: Path, maps: dict[str, np.ndarray], block: int = BLOCK) -> None:
    """Everything the pruned ranking reads besides the impacts: term maxima and block maxima."""
    bounds = chunk_bounds(maps["ranked_first"], len(maps["chunk_article"]), block)
    chunk_article = maps["chunk_article"]
    for v in VIEWS:
        write_term_maxima(folder, v)
    write_block_maxima(folder, "article", lambda d: d // block)
    write_block_maxima(folder, "heading", lambda d: d // block)
    write_block_maxima(
        folder, "chunk", lambda d: np.searchsorted(bounds, d, side="right") - 1, lambda d: chunk_article[d] >= 0
    )
    (folder / BLOCKS_META).write_text(json.dumps({"block": block}) + "\n", encoding="utf-8")


class MaxScoreRanker:
    """Top-k fused article scores of an articles index, exact, by compiled MaxScore (numba).

    Loading it reads nothing and imports no compiler: the kernels are imported (and compiled, or
    read from numba's cache) by :meth:`warm`, which a server calls at start; a one-shot process
    answering one question reads every posting instead (importing numba costs more than that).
    """

    def __init__(
        self,
        views: dict[str, ImpactIndex],
        maxima: dict[str, np.ndarray],
        blocks: dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]],
        block: int,
        maps: dict[str, np.ndarray],
    ):
        self.views, self.maxima, self.blocks, self.block = views, maxima, blocks, block
        self.chunk_article = maps["chunk_article"]
        self.first, self.count = maps["ranked_first"], maps["ranked_count"]
        self.max_count = 0  # the most chunks of an article: read when warmed (opening reads no array)
        self._kernels: Any = None  # the compiled kernels module, once warm
        self._lock = threading.Lock()
        self._recent = threading.local()  # each thread's latest view maxima (see _maxima)

    @staticmethod
    def available() -> bool:
        return importlib.util.find_spec("numba") is not None

    @classmethod
    def load(cls, folder: Path, views: dict[str, ImpactIndex], maps: dict[str, np.ndarray]) -> MaxScoreRanker:
        def mapped(name: str) -> np.ndarray:
            return np.asarray(np.load(folder / name, mmap_mode="r"))

        block = int(json.loads((folder / BLOCKS_META).read_text(encoding="utf-8"))["block"])
        if block < 1:
            raise ValueError(f"{BLOCKS_META} gives blocks of {block} articles")
        maxima = {v: mapped(term_maxima_file(v)) for v in VIEWS}
        blocks = {v: tuple(mapped(f"{v}.{p}.npy") for p in BLOCK_PARTS) for v in VIEWS}
        for v in VIEWS:
            ptr, which, top = blocks[v]
            if len(maxima[v]) != len(views[v].indptr) - 1 or len(ptr) != len(views[v].indptr):
                raise ValueError(f"the bounds of the {v} view do not match its terms")
            if len(which) != len(top) or (len(ptr) and int(ptr[-1]) != len(which)):
                raise ValueError(f"the block maxima of the {v} view differ in length")
        return cls(views, maxima, blocks, block, maps)  # type: ignore[arg-type]

    @property
    def ready(self) -> bool:
        return self._kernels is not None

    def warm(self) -> None:
        """Import the kernels and run them once (numba compiles them, or loads its cached build)."""
        with self._lock:
            if self._kernels is None:
                from . import _maxscore_kernels

                self.max_count = int(self.count.max()) if len(self.count) else 0
                self._kernels = _maxscore_kernels
        if len(self.first):
            self.top([0], 1, {"article": 1.0, "heading": 1.0})
            self.top([0], 1, {"article": 1.0, "heading": 1.0}, np.ones(len(self.first), dtype=bool))

    def _maxima(self, terms: Sequence[int], k: int, allowed: np.ndarray | None, any_k: bool = False):
        """Each view's exact maximum over the articles in scope, and up to k articles met on the way.

        A question's candidates are scored (:meth:`scores_of`) with the terms and scope its top k were
        found with: the maxima found then are kept (per thread, with the terms, scope and k they are of)
        and not walked for again. The maxima do not depend on k (``any_k``: only they are wanted)."""
        scope = None if allowed is None else (len(allowed), np.packbits(allowed).tobytes())  # a copy: a mask changed
        key = (tuple(int(t) for t in terms), scope)  # in place later is another key
        recent = getattr(self._recent, "found", None)
        if recent is None:
            recent = self._recent.found = []
        for known, known_k, found in recent:
            if known == key and (any_k or known_k == k):
                return found
        found = self._walk_maxima(terms, k, allowed)
        recent[:] = [(key, k, found), *recent[: _RECENT_MAXIMA - 1]]
        return found

    def _walk_maxima(self, terms: Sequence[int], k: int, allowed: np.ndarray | None):
        if self._kernels is None:
            self.warm()
        kern = self._kernels
        assert kern is not None
        q = np.asarray(terms, dtype=np.int64)
        c, a, h = (self.views[v] for v in VIEWS)
        none = np.zeros(0, dtype=np.int64)
        ok = np.zeros(0, dtype=np.uint8) if allowed is None else allowed.astype(np.uint8)
        # The heading view first (its postings are the shortest); the articles it found best start the
        # other two views' running maxima at their scores, so that those prune from the first document.
        mh, heading_seeds = kern.view_max(
            h.data, h.indices, h.indptr, self.maxima["heading"], q, none, False, k, 0.0, ok
        )  # fmt: skip
        heading_seeds = heading_seeds[heading_seeds < len(self.first)]
        seen = self._views_of(terms, heading_seeds)
        start_c, start_a = (float(x.max()) if len(x) else 0.0 for x in seen[:2])
        ma, article_seeds = kern.view_max(
            a.data, a.indices, a.indptr, self.maxima["article"], q, none, False, k, start_a, ok
        )  # fmt: skip
        mc, chunk_seeds = kern.view_max(
            c.data, c.indices, c.indptr, self.maxima["chunk"], q, self.chunk_article, True, k, start_c, ok
        )  # fmt: skip
        maxima = np.asarray([mc, ma, mh], dtype=np.float32)
        return maxima, heading_seeds, article_seeds, chunk_seeds, seen

    def _narrow(self, allowed: np.ndarray | None) -> np.ndarray | None:
        """The articles of a scope of at most NARROW_ARTICLES, else None."""
        if allowed is None or np.count_nonzero(allowed) > NARROW_ARTICLES:
            return None
        return np.flatnonzero(allowed).astype(np.int64)

    def _views_of(self, terms: Sequence[int], articles: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The three view scores (best chunk, article, heading) of the given articles, exact."""
        if self._kernels is None:
            self.warm()
        kern = self._kernels
        assert kern is not None
        c, a, h = (self.views[v] for v in VIEWS)
        views = (c.data, c.indices, c.indptr, a.data, a.indices, a.indptr, h.data, h.indices, h.indptr)
        q = np.asarray(terms, dtype=np.int64)
        return kern.views_of(*views, self.first, self.count, self.max_count, q, articles)

    @staticmethod
    def _maxima_of(scored: tuple[np.ndarray, np.ndarray, np.ndarray]) -> np.ndarray:
        """Each view's maximum over the articles scored (as :meth:`_maxima` finds it over a scope: 0 if
        none scores)."""
        return np.asarray([float(x.max()) if len(x) else 0.0 for x in scored], dtype=np.float32).clip(0)

    def scores_of(
        self, terms: Sequence[int], articles: np.ndarray, weights: dict[str, float], allowed: np.ndarray | None = None
    ) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        """The fused and view scores of the given articles, normalised as :meth:`top` normalises them."""
        narrow = self._narrow(allowed)
        maxima = (
            self._maxima(terms, 1, allowed, any_k=True)[0]
            if narrow is None
            else self._maxima_of(self._views_of(terms, narrow))
        )
        chunk, art, head = self._views_of(terms, np.asarray(articles, dtype=np.int64))
        w = np.asarray([weights["article"], weights["heading"]], dtype=np.float32)
        fused = self._kernels.fuse(chunk, art, head, maxima, w)  # type: ignore[union-attr]
        return fused, {"chunk": chunk, "article": art, "heading": head}

    def top(
        self, terms: Sequence[int], k: int, weights: dict[str, float], allowed: np.ndarray | None = None
    ) -> tuple[np.ndarray, np.ndarray, dict[str, np.ndarray]]:
        """The top k articles (unordered), their fused scores and their three view scores; with
        ``allowed`` (a boolean per article), of those articles only. A narrow scope returns every article
        in it, scored (zeros too): the caller's cut to the k best positive ones is the same."""
        narrow = self._narrow(allowed)
        if narrow is not None:  # every article of the scope scored: the same values (sums in query order)
            scored = self._views_of(terms, narrow)
            w = np.asarray([weights["article"], weights["heading"]], dtype=np.float32)
            fused = self._kernels.fuse(*scored, self._maxima_of(scored), w)  # type: ignore[union-attr]
            return narrow, fused, dict(zip(VIEWS, scored))
        maxima, heading_seeds, article_seeds, chunk_seeds, seen = self._maxima(terms, k, allowed)
        kern = self._kernels
        q = np.asarray(terms, dtype=np.int64)
        c, a, h = (self.views[v] for v in VIEWS)
        none = np.zeros(0, dtype=np.int64)
        ok = np.zeros(0, dtype=np.uint8) if allowed is None else allowed.astype(np.uint8)
        w = np.asarray([weights["article"], weights["heading"]], dtype=np.float32)
        # A floor for the fused bar: the k-th best fused score of the articles the maxima were found in
        # (k real articles reach it, so no article below it is in the top k). The heading view's are
        # scored already.
        owners = np.asarray(self.chunk_article[chunk_seeds]) if len(chunk_seeds) else none
        others = np.setdiff1d(np.concatenate([owners[owners >= 0], article_seeds]), heading_seeds)
        others = others[others < len(self.first)]
        floor = 0.0
        if len(heading_seeds) + len(others) >= k:
            more = self._views_of(terms, others)
            seed_fused = kern.fuse(*(np.concatenate([x, y]) for x, y in zip(seen, more)), maxima, w)
            positive = seed_fused[seed_fused > 0]
            if len(positive) >= k:
                floor = float(np.partition(positive, len(positive) - k)[len(positive) - k])
        cb, ab, hb = (self.blocks[v] for v in VIEWS)
        arts, fused, chunk, art, head = kern.top_fused(
            c.data, c.indices, c.indptr, self.maxima["chunk"], *cb,
            a.data, a.indices, a.indptr, self.maxima["article"], *ab,
            h.data, h.indices, h.indptr, self.maxima["heading"], *hb,
            self.block, self.chunk_article, self.first, self.count, self.max_count, q, k, maxima, w,
            np.float32(floor), ok,
        )  # fmt: skip
        return arts, fused, {"chunk": chunk, "article": art, "heading": head}
