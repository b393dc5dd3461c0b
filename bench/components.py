"""The retrieval components one at a time, on the dev questions: ranking figures and extractive answers.

    python bench/components.py CORPUS_DIR [--dense DENSE_INDEX] [--e5 MODEL_DIR]

Builds each index into a temporary folder from CORPUS_DIR (a corpus from `wetqa corpus build`)
and prints, per row: article Hit@1 / Hit@3 / Hit@10 / MRR, chunk R@3 / R@10 (ir-measures, the
`wetqa eval retrieval` definitions) and the extractive answers from the top 3 (ROUGE-L, METEOR,
article citation P / R / Hit, the `wetqa eval generation` definitions). These rows are in-sample
(the weights were chosen on these questions); bench/cross_validate.py gives the cross-validated
figures. --dense adds a full-corpus dense index and the hybrid (RRF) of it with the articles
index; --e5 (a converted model folder) adds dense re-scoring, the default pipeline.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
from pathlib import Path

from wetqa.corpus.dataset import load_dataset
from wetqa.evaluation.answers import CorpusMap, score_record
from wetqa.evaluation.metrics import DEFAULT_METRICS
from wetqa.evaluation.ranking import evaluate_retrieval
from wetqa.generation import Pipeline, make_backend, resolve_generator
from wetqa.retrieval import HybridRetriever, build_index, chunks_of, open_index

ROOT = Path(__file__).resolve().parent.parent
DEV = ROOT.parent / "shared" / "data" / "legalqa" / "dev.jsonl"


def row(label: str, retriever, items, corpus: CorpusMap, min_confidence: float = 0.0, **extractive) -> None:
    """One row; ``min_confidence`` 0: every question answered (the ranking's own figures)."""
    questions = [i.question for i in items]
    results = dict(zip((i.id for i in items), retriever.batch_search(questions, 10)))
    m = evaluate_retrieval(items, results, chunks_of(retriever), (1, 3, 10))
    backend = make_backend(resolve_generator("extractive", **extractive))
    pipeline = Pipeline(retriever, backend, k=3, min_confidence=min_confidence)
    answers = pipeline.ask_many(questions)
    scores = [
        score_record({"answer": a.answer, "cited_ids": [c.id for c in a.citations]}, i, corpus, DEFAULT_METRICS)
        for a, i in zip(answers, items)
    ]

    def mean(key):
        return statistics.mean(s[key] for s in scores)

    a, c = m["article"], m["chunk"]
    print(
        f"| {label} | {a['Hit@1']:.3f} | {a['Hit@3']:.3f} | {a['Hit@10']:.3f} | {a['MRR']:.3f} | {c['R@3']:.3f} | "
        f"{c['R@10']:.3f} | {mean('rougeL'):.3f} | {mean('meteor'):.3f} | {mean('article_precision'):.3f} / "
        f"{mean('article_recall'):.3f} / {mean('article_hit'):.3f} |",
        flush=True,
    )


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("corpus", nargs="?", help="a corpus folder (none with --smoke)")
    ap.add_argument("--dense", help="a dense index built from the same corpus")
    ap.add_argument("--e5", help="a sentence-transformers model folder for dense re-scoring")
    ap.add_argument("--smoke", action="store_true", help="a few questions over tiny indexes built here (seconds)")
    import _smoke

    _smoke.main(ap, lambda a: components(a, load_dataset(DEV)), smoke, "corpus", "give the corpus folder")


def smoke(args: argparse.Namespace) -> None:
    import _smoke

    _smoke.announce("dense and re-scoring by a tiny random model")
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        args.corpus, args.dense = str(_smoke.corpus(work)), str(_smoke.dense_index(work))
        args.e5 = str(_smoke.tiny_model(work))
        components(args, load_dataset(_smoke.dataset(work / "dev.jsonl")))


def components(args: argparse.Namespace, items: list) -> None:
    print(
        "| retriever (top 3 to the extractive answer) | art Hit@1 | Hit@3 | Hit@10 | MRR | chunk R@3 | R@10 | "
        "ROUGE-L | METEOR | cit. P / R / Hit |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        build_index(args.corpus, "bm25s", tmp / "bm25s", progress=False)
        corpus = CorpusMap.from_folder(tmp / "bm25s")
        row("bm25s over words150 chunks (the old default)", open_index(tmp / "bm25s", rescore=False), items, corpus)
        variants = [
            ("articles: chunk view only (max per article)", {"article_weight": 0, "heading_weight": 0}),
            ("+ whole article with headings (1.5)", {"heading_weight": 0}),
            ("+ headings view (0.7): the articles default", {}),
        ]
        for i, (label, options) in enumerate(variants):
            build_index(args.corpus, "articles", tmp / f"a{i}", options, progress=False)
            row(label, open_index(tmp / f"a{i}", rescore=False), items, corpus)
        articles = open_index(tmp / "a2", rescore=False)  # the articles index's own fused views
        if args.dense:
            dense = open_index(args.dense, rescore=False)
            row("dense alone (full corpus)", dense, items, corpus)
            row("hybrid: articles + dense, RRF", HybridRetriever([articles, dense]), items, corpus)
        if args.e5:
            row(
                "articles + dense re-scoring of the top 30",
                rescored(articles, args.e5, clause_weight=0),
                items,
                corpus,
            )
            default = rescored(articles, args.e5)
            row("+ the announcing clause (0.3): the default ranking", default, items, corpus)
            row("+ the second article when within 5% (not adopted)", default, items, corpus, second_article_gap=0.05)
            row("the default with abstention (abstained = 0)", default, items, corpus, min_confidence=None)


def rescored(first, model: str, clause_weight: float = 0.3):
    """``first`` followed by the fixed dense re-scoring of its top 30 (the ranking before the learned one)."""
    from wetqa.retrieval.engines.index import dense_encoder
    from wetqa.retrieval.pipeline import RetrievalPipeline
    from wetqa.retrieval.ranking.rescoring import DenseRescoreStage
    from wetqa.retrieval.ranking.stages import SearchStage

    encoder, cache = dense_encoder(model)
    stage = DenseRescoreStage(encoder, cache, clause_weight=clause_weight, analyzer=first.analyzer)
    return RetrievalPipeline(
        [SearchStage(first), stage], name=f"{first.name}+dense", chunks=first.chunks, engines=[first], need=stage.depth
    )


if __name__ == "__main__":
    main()
