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

from .._base import DamagedIndex, Hit, RetrievalError, RetrieverBase, check_k, check_query
from ..engines.store import ChunkStore
from ..engines.tokenization import DutchAnalyzer
from ..kernels.impacts import ImpactBuilder, Vocabulary, load_view
from ..kernels.maxscore import MaxScoreRanker, block_files, write_bounds
from ..kernels.selection import ImpactIndex, dense_scores
from ..registry import RetrieverInfo, register
from ..scope import DEFAULT_SCOPE, BoundedCache, LawTable, Scope, scope_key


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
# From this many chunks an index ranks with MaxScore (:mod:`.maxscore`) once its kernels are warm;
# below, reading every posting is faster (bench/maxscore.py, warm p50 per question: 29,994 chunks
# 0.24 ms read all against 0.50 pruned; 299,940 chunks 5.9 against 1.8; 1,199,760: 23.8 against 6.4).
# Both give the same ranking, bit for bit.
PRUNE_FROM = 100_000
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
MAPS = ("chunk_article", "ranked_row", "ranked_first", "ranked_count", "ranked_law")


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
            self.maps["ranked_law"].append(article["law_row"])
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
        maps = {
            name: np.frombuffer(values, dtype=np.int64) if values else np.zeros(0, np.int64)
            for name, values in self.maps.items()
        }
        for name, values in maps.items():
            np.save(self.out / f"{name}.npy", values)
        write_bounds(self.out, maps)


class ArticleRetriever(RetrieverBase):
    name = "articles"
    inline = True

    def __init__(
        self,
        views: dict[str, ImpactIndex],
        store: ChunkStore,
        maps: dict[str, np.ndarray],
        options: dict,
        pruned: MaxScoreRanker | None = None,
        laws: LawTable | None = None,
    ):
        self.views = views
        self.laws = laws  # each law version's kind, jurisdiction and validity: what a scope masks by
        self._article_masks = BoundedCache(32)
        self.pruned = pruned  # None for an index built before term maxima were kept: every posting is read
        self.chunks = store
        self.chunk_article = maps["chunk_article"]  # ranked article of each chunk row, -1 for expired articles
        self.ranked_row = maps["ranked_row"]  # ranked article -> its row in the store
        self.first = maps["ranked_first"]  # ranked article -> its first chunk row (its chunks are consecutive)
        self.count = maps["ranked_count"]
        self.ranked_law = maps["ranked_law"]  # ranked article -> its law version (LawTable row)
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
        try:
            laws = LawTable.load(path)
        except (OSError, ValueError, KeyError) as exc:
            raise DamagedIndex(path, f"its law table is not readable ({exc})") from None
        law_of = maps["ranked_law"]
        if laws is None or len(law_of) != n_articles:
            raise DamagedIndex(path, "it keeps no law table for its articles")
        if n_articles and (int(law_of.min()) < 0 or int(law_of.max()) >= len(laws.ids)):
            raise DamagedIndex(path, "the article map points outside the law table")
        laws.ranks_only(law_of)  # a law whose articles have all expired gives a search nothing
        pruned = None
        if MaxScoreRanker.available() and all((path / f).is_file() for f in block_files()):
            try:
                pruned = MaxScoreRanker.load(path, views, maps)
            except (OSError, ValueError, KeyError, TypeError) as exc:
                raise DamagedIndex(path, f"its pruning bounds are not readable ({exc!r})") from None
        return cls(views, store, maps, meta["options"], pruned, laws)

    def allowed(self, scope: Scope | None, question: str = "") -> np.ndarray | None:
        """Which ranked articles a search in ``scope`` may return (None: all), cached per scope."""
        scope = (scope or DEFAULT_SCOPE).for_question(question)
        if self.laws is None:
            return None
        law_mask = self.laws.mask(scope)
        if law_mask is None:
            return None
        ranked_law = self.ranked_law
        return self._article_masks.get(scope_key(scope), lambda: law_mask[np.asarray(ranked_law)])

    def term_ids(self, query: str) -> list[int]:
        tokens = self.analyzer.tokens(query)
        ids = self.chunks.term_ids(tokens)
        return [ids[t] for t in tokens if t in ids]  # in query order: a repeated term counts again

    def _best_chunks(self, chunk_scores: np.ndarray) -> np.ndarray:
        best = np.zeros(self.n_articles, dtype=chunk_scores.dtype)
        # The best chunk of each article, from the chunks that match at all (scores are never negative).
        hit = np.flatnonzero(chunk_scores)
        arts = np.asarray(self.chunk_article[hit])
        ranked = arts >= 0
        np.maximum.at(best, arts[ranked], chunk_scores[hit[ranked]])
        return best

    def view_scores(self, query: str, allowed: np.ndarray | None = None) -> tuple[dict[str, np.ndarray], np.ndarray]:
        """Each view's article scores for a query (0 outside ``allowed``), and the chunk scores (for picking
        a hit's chunk)."""
        return self._views(self.term_ids(query), allowed)

    def _views(self, terms: list[int], allowed: np.ndarray | None) -> tuple[dict[str, np.ndarray], np.ndarray]:
        chunk_scores = dense_scores(self.views["chunk"], terms)
        views = {"chunk": self._best_chunks(chunk_scores)}
        views |= {v: dense_scores(self.views[v], terms) for v in ("article", "heading")}
        if allowed is not None:
            views = {v: np.where(allowed, s, s.dtype.type(0)) for v, s in views.items()}
        return views, chunk_scores

    def fuse(self, views: dict[str, np.ndarray]) -> np.ndarray:
        o = self.options
        return (
            _normalised(views["chunk"])
            + o["article_weight"] * _normalised(views["article"])
            + o["heading_weight"] * _normalised(views["heading"])
        )

    @property
    def weights(self) -> dict[str, float]:
        return {"chunk": 1.0, "article": self.options["article_weight"], "heading": self.options["heading_weight"]}

    def postings_read(self, terms: Sequence[int]) -> int:
        """How many postings scoring every article would read for these terms."""
        return sum(int(v.indptr[t + 1] - v.indptr[t]) for v in self.views.values() for t in terms)

    def _top_all(
        self, terms: list[int], k: int, allowed: np.ndarray | None = None
    ) -> tuple[np.ndarray, np.ndarray, dict[str, np.ndarray]]:
        """Top k articles by fused score, every posting read: (articles, fused, view scores), best first."""
        views, _ = self._views(terms, allowed)
        fused = self.fuse(views)
        order = top_k_positive(fused, np.arange(len(fused)), k)  # position = article
        return order, fused[order], {v: s[order] for v, s in views.items()}

    def _top_pruned(
        self, terms: list[int], k: int, allowed: np.ndarray | None = None
    ) -> tuple[np.ndarray, np.ndarray, dict[str, np.ndarray]]:
        """The same top k (bit for bit), reading a fraction of the postings (:mod:`.maxscore`)."""
        assert self.pruned is not None
        articles, fused, views = self.pruned.top(terms, k, self.weights, allowed)
        pick = top_k_positive(fused, articles, k)
        return articles[pick], fused[pick], {v: s[pick] for v, s in views.items()}

    def row_scores(self, terms: Sequence[int], rows: np.ndarray) -> np.ndarray:
        """Chunk BM25 scores of the given rows (ascending), added as :func:`.selection.dense_scores` does."""
        scores = np.zeros(len(rows), dtype=self.views["chunk"].data.dtype)
        for t in terms:
            docs, impacts = self.views["chunk"].postings(t)
            if not len(docs):
                continue
            at = np.minimum(np.searchsorted(docs, rows), len(docs) - 1)
            found = docs[at] == rows
            scores[found] += impacts[at[found]]
        return scores

    def _pruning(self) -> bool:
        return self.pruned is not None and self.pruned.ready and len(self.chunks) >= PRUNE_FROM

    def top(
        self, terms: list[int], k: int, allowed: np.ndarray | None = None
    ) -> tuple[np.ndarray, np.ndarray, dict[str, np.ndarray]]:
        """The top k articles in scope by fused score (pruned once warm on a large index, else every
        posting read: the same ranking): (articles, fused, view scores), best first."""
        return self._top_pruned(terms, k, allowed) if self._pruning() else self._top_all(terms, k, allowed)

    def scores_of(
        self, terms: list[int], articles: np.ndarray, allowed: np.ndarray | None = None
    ) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        """The fused and view scores of any articles, normalised over the scope as :meth:`top` does."""
        articles = np.asarray(articles, dtype=np.int64)
        if self._pruning():
            assert self.pruned is not None
            return self.pruned.scores_of(terms, articles, self.weights, allowed)
        views, _ = self._views(terms, allowed)
        fused = self.fuse(views)
        return fused[articles], {v: s[articles] for v, s in views.items()}

    def hits(
        self,
        order: np.ndarray,
        fused: np.ndarray,
        views: dict[str, np.ndarray],
        terms: list[int],
        chunk_scores: np.ndarray | None = None,
    ) -> list[Hit]:
        """Hits of ranked articles (best first): each its article's best chunk (by BM25 chunk score, or by
        ``chunk_scores``, one per chunk of the articles in order), with every chunk and paragraph attached."""
        if order.size == 0:
            return []
        first, count = np.asarray(self.first[order]), np.asarray(self.count[order])
        rows = np.concatenate([np.arange(f, f + n) for f, n in zip(first, count)])
        if chunk_scores is None:
            chunk_scores = self.row_scores(terms, rows)
        paragraphs = self.chunks.paragraphs([int(self.ranked_row[a]) for a in order])
        parts_of = self.chunks.rows(rows.tolist())
        hits: list[Hit] = []
        at = 0
        for i, (art, paras) in enumerate(zip(order, paragraphs)):
            n = int(count[i])
            mine, parts, at = chunk_scores[at : at + n], tuple(parts_of[at : at + n]), at + n
            if n == 0:
                continue  # an article in force without text: nothing to quote or cite
            best = int(np.argmax(mine))  # the first of equal best: reading order
            raw = {f"bm25_{v}": float(views[v][i]) for v in VIEWS} | {"doc": int(art)}
            hits.append(Hit(parts[best], float(fused[i]), len(hits) + 1, self.name, parts, paras, raw))
        return hits

    def _search(self, query: str, k: int, scope: Scope | None = None) -> list[Hit]:
        terms = self.term_ids(query)
        order, fused, views = self.top(terms, k, self.allowed(scope, query))
        return self.hits(order, fused, views, terms)

    def warm(self) -> None:
        """Compile (or load) the pruned ranking's kernels, for an index large enough to use them; until
        then every posting is read (the same hits). Smaller indexes never load the compiler (~100 MB)."""
        if self.pruned is not None and len(self.chunks) >= PRUNE_FROM:
            self.pruned.warm()

    def batch_search(
        self, queries: Sequence[str], k: int = 10, threads: int = 1, scope: Scope | None = None
    ) -> list[list[Hit]]:
        check_k(k)
        return [self._search(check_query(q), min(k, self.n_articles), scope) for q in queries]

    def search(self, query: str, k: int = 10, scope: Scope | None = None) -> list[Hit]:
        return self.batch_search([query], k, scope=scope)[0]


register(
    RetrieverInfo(
        name="articles",
        stages="wetqa.retrieval.articles.stage_list:stages_for",
        cls=ArticleRetriever,
        options=ArticleOptions,
        description="ranks whole articles: chunk, whole-article and heading BM25 views fused (the default)",
        inline=ArticleRetriever.inline,
    )
)
