"""Citation quality against the gold articles: precision, recall and Hit.

Chunk level: the gold set is every chunk of every gold article; a cited chunk
is correct when it is one of them. Article level: cited chunks are mapped to
their articles (deduplicated) and compared with the gold articles. Hit: at
least one correct citation. No citation at all: precision 0 (not undefined).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass

from wetqa.corpus.dataset import article_key

from .metrics import Metric, register


@dataclass(frozen=True, slots=True)
class CitationScores:
    precision: float
    recall: float
    hit: float

    def to_json(self) -> dict:
        return asdict(self)


def _prf(cited: list[str], gold: set[str]) -> CitationScores:
    if not gold:
        return CitationScores(0.0, 0.0, 0.0)
    correct = [c for c in cited if c in gold]
    precision = len(correct) / len(cited) if cited else 0.0
    recall = len(set(correct)) / len(gold)
    return CitationScores(precision, recall, 1.0 if correct else 0.0)


def citation_scores(
    cited_ids: Iterable[str],
    gold_keys: set[str],
    chunk_article: Mapping[str, tuple[str, str]],
    article_chunks: Mapping[str, list[str]],
) -> dict[str, CitationScores]:
    """Scores at ``chunk`` and ``article`` level.

    ``chunk_article`` maps a chunk id to (law_id, article label); ids absent
    from it (not in the corpus) count as wrong citations. ``article_chunks``
    maps an article key to its chunk ids.
    """
    cited = list(dict.fromkeys(i.strip() for i in cited_ids if i and i.strip()))
    gold_chunks = {c for key in gold_keys for c in article_chunks.get(key, [])}
    articles = list(dict.fromkeys(article_key(*chunk_article[c]) if c in chunk_article else f"?{c}" for c in cited))
    return {"chunk": _prf(cited, gold_chunks), "article": _prf(articles, gold_keys)}


def _scores(rec: dict, item, corpus) -> dict:
    cited = rec.get("cited_ids") or []
    out: dict = {}
    unknown = [c for c in cited if c not in corpus.chunk_article]
    if unknown:
        out["unknown_cited_ids"] = unknown
    for level, s in citation_scores(cited, item.gold_keys, corpus.chunk_article, corpus.article_chunks).items():
        out[f"{level}_precision"], out[f"{level}_recall"], out[f"{level}_hit"] = s.precision, s.recall, s.hit
    return out


def _depends_on(rec: dict, item, corpus, settings) -> list:
    cited = [str(c) for c in rec.get("cited_ids") or []]
    return [cited, [corpus.chunk_article.get(c) for c in cited], sorted(item.gold_keys)]


_KEYS = tuple(f"{level}_{m}" for level in ("chunk", "article") for m in ("precision", "recall", "hit"))
register(
    Metric(
        name="citations",
        scores=_KEYS,
        complete=("chunk_precision",),
        prefixes=("chunk_", "article_", "unknown_cited_ids"),
        depends_on=_depends_on,
        compute=_scores,
        columns=(("R", "article_recall", 7), ("P", "article_precision", 8), ("Hit", "article_hit", 9)),
    )
)
