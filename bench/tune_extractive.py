"""Cross-validated choice of the extractive backend's paragraph ratio on the dev questions.

    python bench/tune_extractive.py INDEX_DIR [DATASET] [--folds 5]

For each ratio, every question is answered from the index's top hits and scored with ROUGE-L
against its gold answer; each fold picks the ratio with the best mean on the other folds and
its held-out questions are scored with it. Prints in-sample means and the cross-validated mean.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

from wetqa.dataset import load_dataset
from wetqa.evaluation.rouge import rouge_l
from wetqa.generation.backends.extractive import ExtractiveBackend
from wetqa.generation.parser import parse_output
from wetqa.retrieval import open_index

ROOT = Path(__file__).resolve().parent.parent
RATIOS = [0.0, 0.3, 0.5, 0.7, 0.8, 0.9, 1.0]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("index")
    ap.add_argument("dataset", nargs="?", default=str(ROOT.parent / "shared" / "data" / "legalqa" / "dev.jsonl"))
    ap.add_argument("--folds", type=int, default=5)
    ap.add_argument("-k", type=int, default=3)
    args = ap.parse_args()
    items = load_dataset(args.dataset)
    hits = open_index(args.index).batch_search([i.question for i in items], args.k)
    scores = {}
    for ratio in RATIOS:
        backend = ExtractiveBackend(paragraph_ratio=ratio)
        answers = [
            parse_output(backend.answer(i.question, h), [c.doc_id for x in h for c in x.article_chunks]).answer
            for i, h in zip(items, hits)
        ]
        scores[ratio] = np.array([rouge_l(a, i.answer).fmeasure for a, i in zip(answers, items)])
        print(f"paragraph_ratio {ratio:.1f}: ROUGE-L {scores[ratio].mean():.4f} (in-sample)")
    order = np.random.default_rng(0).permutation(len(items))
    held = np.zeros(len(items))
    chosen = []
    for f in range(args.folds):
        test = order[f :: args.folds]
        train = np.setdiff1d(np.arange(len(items)), test)
        best = max(RATIOS, key=lambda r: (scores[r][train].mean(), r))
        chosen.append(best)
        held[test] = scores[best][test]
    print(f"{args.folds}-fold cross-validated ROUGE-L {held.mean():.4f}; ratios chosen: {chosen}")


if __name__ == "__main__":
    main()
