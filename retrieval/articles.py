"""Articles as the unit of ranking: three BM25 views of each article, fused, one hit per article.

A question is answered by an article, and most of the signal that picks the right one is
outside any single 150-word chunk: the law's title, the Boek / Titel / Afdeling headings
and the article's own heading. So each article is scored three ways (bm25s, the Dutch
analyzer of :mod:`.tokenization`):

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

import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from wetqa.corpus.build import ARTICLES
from wetqa.corpus.records import Chunk
from wetqa.settings import setting

from ._base import Hit, RetrievalError, check_k, check_query
from .registry import RetrieverInfo, register
from .selection import ImpactIndex, dense_scores
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


def _bm25(texts: Sequence[Sequence[str]], k1: float, b: float):
    import bm25s

    model = bm25s.BM25(k1=k1, b=b, method="lucene")
    model.index(list(texts), show_progress=False)
    return model


class _View:
    """One BM25 index and the impact arrays scored from it."""

    def __init__(self, model):
        self.vocab = model.vocab_dict
        self.impacts = ImpactIndex.from_bm25s(model)

    def scores(self, tokens: Sequence[str]) -> np.ndarray:
        return dense_scores(self.impacts, [self.vocab[t] for t in tokens if t in self.vocab])


def _normalised(x: np.ndarray) -> np.ndarray:
    top = float(x.max()) if x.size else 0.0
    return x / top if top > 0 else x


class ArticleRetriever:
    name = "articles"

    def __init__(
        self,
        views: dict[str, _View],
        chunks: list[Chunk],
        chunk_article: np.ndarray,
        n_articles: int,
        options: dict,
        paragraphs: list[tuple[str, ...]] | None = None,
    ):
        self.views = views
        self.chunks = chunks
        self.chunk_article = chunk_article  # article row of each chunk, -1 for chunks of expired articles
        self.n_articles = n_articles
        self.paragraphs = paragraphs or []  # article row -> its paragraphs (lid / top-level al)
        self.options = options
        self.analyzer = DutchAnalyzer(options["stemmer"])
        self._ranked = chunk_article >= 0
        # The chunk rows of article a are _by_article[_starts[a]:_starts[a + 1]], in corpus (reading) order.
        self._by_article = np.argsort(chunk_article, kind="stable")
        self._starts = np.searchsorted(chunk_article[self._by_article], np.arange(n_articles + 1))

    @staticmethod
    def build(
        chunks: Sequence[Chunk], out: Path, options: dict, progress: bool = True, corpus_dir: Path | None = None
    ) -> None:
        if corpus_dir is None or not (Path(corpus_dir) / ARTICLES).is_file():
            raise RetrievalError(f"the articles retriever needs the corpus folder's {ARTICLES}")
        analyzer = DutchAnalyzer(options["stemmer"])
        articles = []
        with open(Path(corpus_dir) / ARTICLES, encoding="utf-8") as fh:
            for line in fh:
                a = json.loads(line)
                if not a["expired"]:
                    row = {k: a.get(k, "") for k in ("bwb_id", "version_date", "law", "article", "title", "path_label")}
                    row["text"] = a["text"]
                    row["paragraphs"] = a.get("paragraphs") or [a["text"]]  # older corpora: the text as one
                    articles.append(row)
        if not articles:
            raise RetrievalError("the corpus has no articles in force: nothing to rank")
        row_of = {(a["bwb_id"], a["version_date"], a["article"]): i for i, a in enumerate(articles)}
        chunk_article = np.array(
            [row_of.get((c.bwb_id, c.version_date, c.article), -1) for c in chunks], dtype=np.int64
        )
        chunk_tokens = [analyzer.tokens(c.indexed_text) for c in chunks]
        if not any(chunk_tokens):
            raise RetrievalError(
                "the corpus has no indexable words (every chunk is empty or stop words): nothing to search"
            )
        o = options
        _bm25(chunk_tokens, o["k1"], o["b"]).save(str(out / "bm25s-chunk"))
        heads = [heading_text(a) for a in articles]
        _bm25(
            [analyzer.tokens(h + "\n" + a["text"]) for h, a in zip(heads, articles)], o["article_k1"], o["article_b"]
        ).save(str(out / "bm25s-article"))
        _bm25([analyzer.tokens(h) for h in heads], o["heading_k1"], o["heading_b"]).save(str(out / "bm25s-heading"))
        np.save(out / "chunk_article.npy", chunk_article)
        (out / "articles.json").write_text(
            json.dumps(
                {"n_articles": len(articles), "paragraphs": [a["paragraphs"] for a in articles]}, ensure_ascii=False
            ),
            encoding="utf-8",
        )

    @classmethod
    def load(cls, path: Path, meta: dict, chunks: list[Chunk]) -> ArticleRetriever:
        import bm25s

        views = {v: _View(bm25s.BM25.load(str(path / f"bm25s-{v}"), mmap=False)) for v in VIEWS}
        chunk_article = np.load(path / "chunk_article.npy")
        if len(chunk_article) != len(chunks):
            raise RetrievalError(f"damaged index {path}: chunk map does not match its chunks; rebuild it")
        stored = json.loads((path / "articles.json").read_text(encoding="utf-8"))
        paragraphs = [tuple(p) for p in stored.get("paragraphs", [])]
        return cls(views, chunks, chunk_article, stored["n_articles"], meta["options"], paragraphs)

    def view_scores(self, query: str) -> tuple[dict[str, np.ndarray], np.ndarray]:
        """Each view's article scores for a query, and the chunk scores (for picking a hit's chunk)."""
        tokens = self.analyzer.tokens(query)
        chunk_scores = self.views["chunk"].scores(tokens)
        best = np.zeros(self.n_articles, dtype=chunk_scores.dtype)
        np.maximum.at(best, self.chunk_article[self._ranked], chunk_scores[self._ranked])
        return {
            "chunk": best,
            "article": self.views["article"].scores(tokens),
            "heading": self.views["heading"].scores(tokens),
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
        candidates = np.flatnonzero(fused > 0)
        if candidates.size == 0:
            return []
        if candidates.size > k:
            candidates = candidates[np.argpartition(-fused[candidates], k - 1)[:k]]
        order = candidates[np.lexsort((candidates, -fused[candidates]))]  # ties: the earlier article
        hits = []
        for rank, art in enumerate(order, 1):
            rows = self._by_article[self._starts[art] : self._starts[art + 1]]
            chunk = rows[int(np.argmax(chunk_scores[rows]))]  # the first of equal best: reading order
            parts = tuple(self.chunks[int(r)] for r in rows)
            paragraphs = self.paragraphs[art] if art < len(self.paragraphs) else ()
            hits.append(Hit(self.chunks[int(chunk)], float(fused[art]), rank, self.name, parts, paragraphs))
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
        needs_corpus=True,
        inline=True,
    )
)
