"""Retrieval evaluation at chunk and article level, computed by ir-measures (pytrec_eval).

Chunk level: a retrieved chunk is relevant when it belongs to a gold article
(relevant set: every chunk of every gold article). Article level: the ranked
chunks are mapped to their articles, keeping each article's first rank.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path

from wetqa.corpus.dataset import QAItem, article_key
from wetqa.corpus.records import Chunk
from wetqa.retrieval import Hit

MEASURE_NAMES = {"R": "R@{k}", "Success": "Hit@{k}"}


def measures_for(ks: Sequence[int]) -> list:
    from ir_measures import RR, R, Success, nDCG

    ms = []
    for k in ks:
        ms += [R @ k, Success @ k]
    ms += [nDCG @ 10, RR]
    return ms


def _name(measure) -> str:
    s = str(measure)
    if s.startswith("Success@"):
        return "Hit@" + s.split("@")[1]
    if s == "RR":
        return "MRR"
    return s


def chunk_qrels(items: Iterable[QAItem], chunks: Sequence[Chunk]) -> dict[str, dict[str, int]]:
    by_article: dict[str, list[str]] = {}
    for c in chunks:
        by_article.setdefault(article_key(c.law_id, c.article), []).append(c.id)
    return {item.id: {cid: 1 for key in item.gold_keys for cid in by_article.get(key, [])} for item in items}


def article_qrels(items: Iterable[QAItem]) -> dict[str, dict[str, int]]:
    return {item.id: {key: 1 for key in item.gold_keys} for item in items}


def chunk_run(results: dict[str, list[Hit]]) -> dict[str, list[str]]:
    return {qid: [h.id for h in hits] for qid, hits in results.items()}


def article_run(results: dict[str, list[Hit]]) -> dict[str, list[str]]:
    run: dict[str, list[str]] = {}
    for qid, hits in results.items():
        seen: list[str] = []
        for h in hits:
            key = article_key(h.chunk.law_id, h.chunk.article)
            if key not in seen:
                seen.append(key)
        run[qid] = seen
    return run


def score_ranked(qrels: dict[str, dict[str, int]], run: dict[str, list[str]], ks: Sequence[int]) -> dict[str, float]:
    """Mean of each measure over all questions in ``qrels``; a question with no hits scores 0.

    Scores given to pytrec_eval are derived from rank so that ties in the
    retriever's scores cannot reorder its ranking.
    """
    import ir_measures

    measures = measures_for(ks)
    trec_run = {qid: {doc: float(len(docs) - i) for i, doc in enumerate(docs)} for qid, docs in run.items() if docs}
    evaluator = ir_measures.pytrec_eval.evaluator(measures, qrels)
    sums = {_name(m): 0.0 for m in measures}
    for metric in evaluator.iter_calc(trec_run):
        sums[_name(metric.measure)] += metric.value
    n = len(qrels)
    return {name: round(total / n, 4) for name, total in sums.items()}


def write_trec_run(path: Path, results: dict[str, list[Hit]], tag: str, level: str = "chunk") -> None:
    from wetqa.io import atomic_file

    run = chunk_run(results) if level == "chunk" else article_run(results)
    with atomic_file(path) as fh:
        for qid, docs in run.items():
            for rank, doc in enumerate(docs, 1):
                fh.write(f"{qid} Q0 {doc.replace(' ', '_')} {rank} {len(docs) - rank + 1} {tag}\n")


def write_qrels(path: Path, qrels: dict[str, dict[str, int]]) -> None:
    from wetqa.io import atomic_file

    with atomic_file(path) as fh:
        for qid, docs in qrels.items():
            for doc, rel in docs.items():
                fh.write(f"{qid} 0 {doc.replace(' ', '_')} {rel}\n")


def evaluate_retrieval(
    items: Sequence[QAItem], results: dict[str, list[Hit]], chunks: Sequence[Chunk], ks: Sequence[int] = (3, 5, 10)
) -> dict:
    """``{"chunk": {...}, "article": {...}, "n_questions": N}`` for ranked hits per question id."""
    return {
        "chunk": score_ranked(chunk_qrels(items, chunks), chunk_run(results), ks),
        "article": score_ranked(article_qrels(items), article_run(results), ks),
        "n_questions": len(items),
    }
