"""Scoring speed: ROUGE-L + METEOR + citations for 102 answers against bare rouge-score.

    python bench/evaluation.py [--smoke]

The answers are extractive answers to the dev questions (generated here
unless a run is given), doubled to 102 pairs like the published set. Goal:
wetqa's full scoring <= 2x the time of bare rouge-score's ROUGE-L.
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

_HERE = Path(__file__).resolve().parent
ROOT = _HERE.parent
SHARED = ROOT.parent / "shared" / "data"


def main(laws: Path = SHARED / "bwb", dataset: Path = SHARED / "legalqa" / "dev.jsonl") -> None:
    from rouge_score import rouge_scorer

    from wetqa.corpus import BuildOptions, build_corpus
    from wetqa.evaluation import load_dataset
    from wetqa.evaluation.answers import CorpusMap, score_record
    from wetqa.evaluation.meteor import meteor, meteor_variant
    from wetqa.generation import Pipeline, make_backend, resolve_generator
    from wetqa.retrieval import build_index, open_index

    items = load_dataset(dataset)
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        build_corpus([laws], tmp / "corpus", BuildOptions(), progress=False)
        build_index(tmp / "corpus", "bm25s", tmp / "idx", progress=False)
        pipeline = Pipeline(open_index(tmp / "idx"), make_backend(resolve_generator("extractive")), k=3)
        answers = pipeline.ask_many([i.question for i in items])
        corpus = CorpusMap.from_folder(tmp / "idx")
    recs = [
        {"id": it.id, "answer": a.answer, "cited_ids": [c.id for c in a.citations]} for it, a in zip(items, answers)
    ]
    pairs = list(zip(recs, items)) * 2  # 102 answers (16 in a smoke run)
    meteor("warm", "up")  # WordNet loads once, outside the timing (it is cached per process)
    print(f"{len(pairs)} answers; METEOR variant {meteor_variant()}")

    scorer = rouge_scorer.RougeScorer(["rougeL"])
    t = time.perf_counter()
    for rec, item in pairs:
        scorer.score(item.answer, rec["answer"])
    bare = time.perf_counter() - t
    print(f"bare rouge-score ROUGE-L (default tokenizer, no stemming): {bare * 1000:.0f} ms")

    for name, metrics in (
        ("ROUGE-L", ["rouge"]),
        ("METEOR", ["meteor"]),
        ("citations", ["citations"]),
        ("ROUGE-L + METEOR + citations", ["rouge", "meteor", "citations"]),
    ):
        t = time.perf_counter()
        for rec, item in pairs:
            score_record(rec, item, corpus, metrics)
        took = time.perf_counter() - t
        print(f"wetqa {name:30}: {took * 1000:6.0f} ms = {took / bare:.2f}x bare rouge-score")
    print("goal: ROUGE-L + METEOR + citations <= 2x")


def smoke() -> None:
    import _smoke

    _smoke.announce()
    with tempfile.TemporaryDirectory() as tmp:
        main(_smoke.laws(Path(tmp) / "bwb"), _smoke.dataset(Path(tmp) / "dev.jsonl"))


if __name__ == "__main__":
    import sys

    if "--smoke" in sys.argv:
        smoke()
    else:
        main()
