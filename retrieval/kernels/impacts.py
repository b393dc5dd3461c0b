"""BM25 impact arrays built from a stream of documents, stored as memory-mapped numpy arrays.

The arrays are bm25s' (``method="lucene"``): for every term, its postings (document, impact) in
document order, as CSC ``data`` (float32 impacts), ``indices`` (int32 documents) and ``indptr``
(int64). They are computed the way bm25s computes them, down to the float rounding (``tests``
compare them with bm25s bit for bit), but with bounded memory: each document's term counts go to
a temporary file as it is read, and at the end the impacts are computed block by block and written
into their places in the memory-mapped output (a counting sort by term: documents stay ascending
within each term). So building an index of any size holds one block, the vocabulary and the
document lengths in memory, never the corpus.

Several views share one vocabulary (term -> id, kept in the index's store); a term missing from a
view simply has no postings there, which scores exactly as a term dropped from the query.
"""

from __future__ import annotations

import json
import math
import os
from array import array
from collections import Counter
from collections.abc import Iterable, Sequence
from pathlib import Path

import numpy as np

from .selection import ImpactIndex

_FLUSH_PAIRS = 1 << 20  # (term, count) pairs buffered before they go to the temporary file
_BLOCK_PAIRS = 1 << 22  # pairs placed per step at the end


class Vocabulary:
    """Term -> id, ids given in order of first sight."""

    def __init__(self) -> None:
        self.ids: dict[str, int] = {}

    def __len__(self) -> int:
        return len(self.ids)

    def ids_of(self, tokens: Iterable[str]) -> list[int]:
        ids = self.ids
        return [ids.setdefault(t, len(ids)) for t in tokens]

    def items(self) -> Iterable[tuple[str, int]]:
        return self.ids.items()


class ImpactBuilder:
    """One BM25 view: ``add`` each document's term ids in document order, then ``finish``."""

    def __init__(self, folder: Path, name: str, k1: float, b: float):
        self.folder, self.name, self.k1, self.b = folder, name, k1, b
        self._terms_path = folder / f".{name}.terms.tmp"
        self._tfs_path = folder / f".{name}.tfs.tmp"
        self._terms_fh = open(self._terms_path, "wb")
        self._tfs_fh = open(self._tfs_path, "wb")
        self.lengths = array("q")  # tokens per document
        self.pairs = array("q")  # distinct terms per document
        self._terms: list[int] = []
        self._tfs: list[int] = []

    def add(self, term_ids: Sequence[int]) -> None:
        self.lengths.append(len(term_ids))
        counts = Counter(term_ids)
        self.pairs.append(len(counts))
        self._terms.extend(counts.keys())
        self._tfs.extend(counts.values())
        if len(self._terms) >= _FLUSH_PAIRS:
            self._flush()

    def _flush(self) -> None:
        np.asarray(self._terms, dtype=np.int32).tofile(self._terms_fh)
        np.asarray(self._tfs, dtype=np.int32).tofile(self._tfs_fh)
        self._terms.clear()
        self._tfs.clear()

    def finish(self, vocab_size: int) -> dict:
        """Write ``{name}.data.npy``, ``.indices.npy``, ``.indptr.npy``; returns the view's numbers."""
        self._flush()
        self._terms_fh.close()
        self._tfs_fh.close()
        n_docs = len(self.lengths)
        lengths = np.frombuffer(self.lengths, dtype=np.int64) if n_docs else np.zeros(0, np.int64)
        pairs = np.frombuffer(self.pairs, dtype=np.int64) if n_docs else np.zeros(0, np.int64)
        terms_all = np.memmap(self._terms_path, dtype=np.int32, mode="r") if pairs.sum() else np.zeros(0, np.int32)
        tfs_all = np.memmap(self._tfs_path, dtype=np.int32, mode="r") if pairs.sum() else np.zeros(0, np.int32)
        df = np.zeros(vocab_size, dtype=np.int64)
        for start in range(0, len(terms_all), _BLOCK_PAIRS):
            df += np.bincount(terms_all[start : start + _BLOCK_PAIRS], minlength=vocab_size)
        # As bm25s: the mean of the int64 lengths, idf computed per term in float64 and kept as float32.
        avgdl = lengths.mean() if n_docs else np.float64(1.0)
        idf = np.zeros(vocab_size, dtype=np.float32)
        for t in np.flatnonzero(df):
            d = int(df[t])
            idf[t] = math.log(1 + (n_docs - d + 0.5) / (d + 0.5))
        indptr = np.zeros(vocab_size + 1, dtype=np.int64)
        np.cumsum(df, out=indptr[1:])
        total = int(indptr[-1])
        data = np.lib.format.open_memmap(self.folder / f"{self.name}.data.npy", "w+", np.float32, (total,))
        indices = np.lib.format.open_memmap(self.folder / f"{self.name}.indices.npy", "w+", np.int32, (total,))
        cursor = indptr[:-1].copy()
        ends = np.cumsum(pairs)
        doc, at = 0, 0
        while doc < n_docs:
            # Whole documents up to about a block of pairs.
            last = max(doc + 1, int(np.searchsorted(ends, at + _BLOCK_PAIRS, side="right")))
            last = min(last, n_docs)
            stop = int(ends[last - 1])
            terms = np.asarray(terms_all[at:stop])
            tf = np.asarray(tfs_all[at:stop]).astype(np.float64)
            docs = np.repeat(np.arange(doc, last, dtype=np.int64), pairs[doc:last])
            # bm25s (lucene): tf / (k1 * ((1 - b) + b * l_d / l_avg) + tf) in float64, times the float32
            # idf, stored as float32.
            norm = self.k1 * ((1 - self.b) + self.b * lengths[docs] / avgdl)
            impact = (idf[terms].astype(np.float64) * (tf / (norm + tf))).astype(np.float32)
            order = np.argsort(terms, kind="stable")  # documents stay ascending within a term
            sorted_terms = terms[order]
            uniq, first, counts = np.unique(sorted_terms, return_index=True, return_counts=True)
            rank = np.arange(len(sorted_terms), dtype=np.int64) - np.repeat(first, counts)
            pos = cursor[sorted_terms] + rank
            data[pos] = impact[order]
            indices[pos] = docs[order]
            cursor[uniq] += counts
            doc, at = last, stop
        data.flush()
        indices.flush()
        del data, indices, terms_all, tfs_all
        np.save(self.folder / f"{self.name}.indptr.npy", indptr)
        for path in (self._terms_path, self._tfs_path):
            os.unlink(path)
        info = {"docs": n_docs, "postings": total, "avgdl": float(avgdl), "k1": self.k1, "b": self.b}
        (self.folder / f"{self.name}.json").write_text(json.dumps(info) + "\n", encoding="utf-8")
        return info


def load_view(folder: Path, name: str) -> ImpactIndex:
    """A view's arrays, memory-mapped: opening reads their headers only."""
    info = json.loads((folder / f"{name}.json").read_text(encoding="utf-8"))
    return ImpactIndex(
        # Plain array views of the mapped files: numpy's memmap subclass costs a Python call per slice,
        # and a question takes thousands of slices on a large index (1.7 ms a question at 40x).
        np.asarray(np.load(folder / f"{name}.data.npy", mmap_mode="r")),
        np.asarray(np.load(folder / f"{name}.indices.npy", mmap_mode="r")),
        np.asarray(np.load(folder / f"{name}.indptr.npy", mmap_mode="r")),
        int(info["docs"]),
    )
