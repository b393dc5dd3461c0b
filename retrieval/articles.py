"""Articles as the unit of ranking: three BM25 views of each article, fused, one hit per article.

A question is answered by an article, and most of the signal that picks the right one is
outside any single 150-word chunk: the law's title, the Boek / Titel / Afdeling headings
and the article's own heading. So each article is scored three ways (BM25 impacts as bm25s
computes them, built by :mod:`.impacts`; the Dutch analyzer of :mod:`.tokenization`):

- ``chunk``: the best of its chunks (max over the chunk BM25 scores: sum and top-m
  favour long articles and measured worse on the dev questions);
- ``article``: the whole article as one document, prefixed with law title and headings;
- ``heading``: law title, headings and article label/title alone.

Each score is divided by its best value for the question (so the weights mean the same for
every question) and ``chunk + article_weight * article + heading_weight * heading`` ranks
the articles. A hit is the article's best-scoring chunk, so everything downstream (prompts,
citations by DOC id, chunk-level metrics) keeps working; expired articles are not ranked.
"""

from __future__ import annotations

from array import array
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from wetqa.corpus.records import Chunk
from wetqa.settings import setting

from ._base import DamagedIndex, Hit, RetrievalError, check_k, check_query
from .impacts import ImpactBuilder, Vocabulary, load_view
from .registry import RetrieverInfo, register
from .selection import ImpactIndex, dense_scores
from .store import ChunkStore
from .tokenization import DutchAnalyzer


# Fusion weights: those that 3 of 5 cross-validation folds picked on the 51 dev questions
# (bench/cross_validate.py; cross-validated article Hit@1 .627, MRR .739 against .569 / .692
# for the chunk view alone). BM25 parameters: Pyserini's for chunks and whole articles,
# the Lucene defaults for the short heading view.
@dataclass(frozen=True, slots=True)
class ArticleOptions:
    stemmer: str = setting("dutch_porter", "Snowball stemmer of the analyzer (PyStemmer name)")
    k1: float = setting(0.9, "BM25: term-frequency saturation", minimum=0)
    b: float = setting(0.4, "BM25: length normalisation", minimum=0, maximum=1)
    article_k1: float = setting(0.9, "articles: k1 of the whole-article view", minimum=0)
    article_b: float = setting(0.4, "articles: b of the whole-article view", minimum=0, maximum=1)
    heading_k1: float = setting(1.2, "articles: k1 of the heading view", minimum=0)
    heading_b: float = setting(0.75, "articles: b of the heading view", minimum=0, maximum=1)
    article_weight: float = setting(1.5, "articles: weight of the whole-article view", minimum=0)
    heading_weight: float = setting(0.7, "articles: weight of the heading view", minimum=0)


DEFAULT_OPTIONS = asdict(ArticleOptions())
VIEWS = ("chunk", "article", "heading")


def heading_text(article: dict) -> str:
    head = f"{article['article']} {article.get('title') or ''}".strip()
    return "\n".join(x for x in (article["law"], article.get("path_label") or "", head) if x)


def top_k_positive(scores: np.ndarray, ids: np.ndarray, k: int) -> np.ndarray:
    """Positions of the k best positive scores, best first; equal scores by lower id.

    Every score equal to the k-th is kept before the sort: a partition alone picks any of the equal
    ones at the cut (so of eight copies of a law, not the first ones).
    """
    candidates = np.flatnonzero(scores > 0)
    if candidates.size > k:
        kth = np.partition(scores[candidates], candidates.size - k)[candidates.size - k]
        candidates = candidates[scores[candidates] >= kth]
    return candidates[np.lexsort((ids[candidates], -scores[candidates]))][:k]


def _normalised(x: np.ndarray) -> np.ndarray:
    top = float(x.max()) if x.size else 0.0
    return x / top if top > 0 else x


# The files an articles index holds besides the store: its three views and the maps between chunk
# rows, ranked articles (those in force) and the store's article rows.
MAPS = ("chunk_article", "ranked_row", "ranked_first", "ranked_count")


class ArticleBuilder:
    """Streams the corpus into the three views and the maps (see :mod:`.impacts`)."""

    def __init__(self, out: Path, options: dict, vocab: Vocabulary, progress: bool = True):
        o = options
        self.out, self.vocab = out, vocab
        self.analyzer = DutchAnalyzer(o["stemmer"])
        self.views = {
            "chunk": ImpactBuilder(out, "chunk", o["k1"], o["b"]),
            "article": ImpactBuilder(out, "article", o["article_k1"], o["article_b"]),
            "heading": ImpactBuilder(out, "heading", o["heading_k1"], o["heading_b"]),
        }
        self.maps = {name: array("q") for name in MAPS}
        self.tokens = 0

    def _ids(self, text: str) -> list[int]:
        ids = self.vocab.ids_of(self.analyzer.tokens(text))
        self.tokens += len(ids)
        return ids

    def add(self, article: dict, article_row: int, chunks: Sequence[Chunk], rows: range) -> None:
        ranked = -1
        if not article["expired"]:
            ranked = len(self.maps["ranked_row"])
            self.maps["ranked_row"].append(article_row)
            self.maps["ranked_first"].append(rows.start)
            self.maps["ranked_count"].append(len(rows))
            head = heading_text(article)
            self.views["article"].add(self._ids(head + "\n" + article["text"]))
            self.views["heading"].add(self._ids(head))
        for c in chunks:
            self.views["chunk"].add(self._ids(c.indexed_text))
            self.maps["chunk_article"].append(ranked)

    def finish(self) -> None:
        if not self.maps["ranked_row"]:
            raise RetrievalError("the corpus has no articles in force: nothing to rank")
        if not self.tokens:
            raise RetrievalError(
                "the corpus has no indexable words (every chunk is empty or stop words): nothing to search"
            )
        for view in self.views.values():
            view.finish(len(self.vocab))
        for name, values in self.maps.items():
            np.save(
                self.out / f"{name}.npy", np.frombuffer(values, dtype=np.int64) if values else np.zeros(0, np.int64)
            )


class ArticleRetriever:
    name = "articles"

    def __init__(self, views: dict[str, ImpactIndex], store: ChunkStore, maps: dict[str, np.ndarray], options: dict):
        self.views = views
        self.chunks = store
        self.chunk_article = maps["chunk_article"]  # ranked article of each chunk row, -1 for expired articles
        self.ranked_row = maps["ranked_row"]  # ranked article -> its row in the store
        self.first = maps["ranked_first"]  # ranked article -> its first chunk row (its chunks are consecutive)
        self.count = maps["ranked_count"]
        self.n_articles = len(self.ranked_row)
        self.options = options
        self.analyzer = DutchAnalyzer(options["stemmer"])

    @staticmethod
    def builder(out: Path, options: dict, vocab: Vocabulary, progress: bool = True) -> ArticleBuilder:
        return ArticleBuilder(out, options, vocab, progress)

    @classmethod
    def load(cls, path: Path, meta: dict, store: ChunkStore) -> ArticleRetriever:
        views = {v: load_view(path, v) for v in VIEWS}
        maps = {name: np.asarray(np.load(path / f"{name}.npy", mmap_mode="r")) for name in MAPS}
        if len(maps["chunk_article"]) != len(store):
            raise DamagedIndex(path, "the chunk map does not match its chunks")
        # Every map must point inside what it maps to, or a search would read past an array.
        n_articles = len(maps["ranked_row"])
        ca = maps["chunk_article"]
        if len(ca) and (int(ca.min()) < -1 or int(ca.max()) >= n_articles):
            raise DamagedIndex(path, f"the chunk map points outside the {n_articles} articles")
        first, count = maps["ranked_first"], maps["ranked_count"]
        if len(first) != n_articles or len(count) != n_articles:
            raise DamagedIndex(path, "the article maps differ in length")
        if n_articles and (int(first.min()) < 0 or int((first + count).max()) > len(store)):
            raise DamagedIndex(path, "the article maps point outside the chunks")
        return cls(views, store, maps, meta["options"])

    def term_ids(self, query: str) -> list[int]:
        tokens = self.analyzer.tokens(query)
        ids = self.chunks.term_ids(tokens)
        return [ids[t] for t in tokens if t in ids]  # in query order: a repeated term counts again

    def view_scores(self, query: str) -> tuple[dict[str, np.ndarray], np.ndarray]:
        """Each view's article scores for a query, and the chunk scores (for picking a hit's chunk)."""
        terms = self.term_ids(query)
        chunk_scores = dense_scores(self.views["chunk"], terms)
        best = np.zeros(self.n_articles, dtype=chunk_scores.dtype)
        # The best chunk of each article, from the chunks that match at all (scores are never negative).
        hit = np.flatnonzero(chunk_scores)
        arts = np.asarray(self.chunk_article[hit])
        ranked = arts >= 0
        np.maximum.at(best, arts[ranked], chunk_scores[hit[ranked]])
        return {
            "chunk": best,
            "article": dense_scores(self.views["article"], terms),
            "heading": dense_scores(self.views["heading"], terms),
        }, chunk_scores

    def fuse(self, views: dict[str, np.ndarray]) -> np.ndarray:
        o = self.options
        return (
            _normalised(views["chunk"])
            + o["article_weight"] * _normalised(views["article"])
            + o["heading_weight"] * _normalised(views["heading"])
        )

    def _search(self, query: str, k: int) -> list[Hit]:
        views, chunk_scores = self.view_scores(query)
        fused = self.fuse(views)
        order = top_k_positive(fused, np.arange(len(fused)), k)  # position = article
        if order.size == 0:
            return []
        paragraphs = self.chunks.paragraphs([int(self.ranked_row[a]) for a in order])
        hits: list[Hit] = []
        for art, paras in zip(order, paragraphs):
            first, n = int(self.first[art]), int(self.count[art])
            if n == 0:
                continue  # an article in force without text: nothing to quote or cite
            rows = np.arange(first, first + n)
            chunk = int(rows[int(np.argmax(chunk_scores[rows]))])  # the first of equal best: reading order
            parts = tuple(self.chunks.rows(rows))
            raw = {f"bm25_{v}": float(views[v][art]) for v in VIEWS} | {"doc": int(art)}
            hit = Hit(parts[chunk - first], float(fused[art]), len(hits) + 1, self.name, parts, paras, raw)
            hits.append(hit)
        return hits

    def batch_search(self, queries: Sequence[str], k: int = 10, threads: int = 1) -> list[list[Hit]]:
        check_k(k)
        return [self._search(check_query(q), min(k, self.n_articles)) for q in queries]

    def search(self, query: str, k: int = 10) -> list[Hit]:
        return self.batch_search([query], k)[0]


register(
    RetrieverInfo(
        name="articles",
        cls=ArticleRetriever,
        options=ArticleOptions,
        description="ranks whole articles: chunk, whole-article and heading BM25 views fused (the default)",
        inline=True,
    )
)
