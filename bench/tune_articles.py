"""Cross-validated fusion weights of the article retriever on the dev questions.

    python bench/tune_articles.py INDEX_DIR [DATASET] [--folds 5]

INDEX_DIR is an ``articles`` index (``wetqa index --retriever articles``). Each view's
scores are computed once per question; for each fold the weights with the best MRR on the
other folds are chosen (ties: the smaller weights) and the held-out questions are ranked
with them. Prints the in-sample best beside the cross-validated figures, which are the
ones to report: 51 questions are few, and an in-sample best overstates.
"""

from __future__ import annotations

import argparse
import itertools
from pathlib import Path

import numpy as np

from wetqa.dataset import article_key, load_dataset
from wetqa.retrieval import open_index

ROOT = Path(__file__).resolve().parent.parent
GRID = [0.0, 0.1, 0.2, 0.3, 0.5, 0.7, 1.0, 1.5]


def _norm(x: np.ndarray) -> np.ndarray:
    top = float(x.max())
    return x / top if top > 0 else x


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("index")
    ap.add_argument("dataset", nargs="?", default=str(ROOT.parent / "shared" / "data" / "legalqa" / "dev.jsonl"))
    ap.add_argument("--folds", type=int, default=5)
    args = ap.parse_args()
    retriever = open_index(args.index)
    items = load_dataset(args.dataset)
    # Article row -> key, from the chunk map.
    keys = {}
    for chunk, row in zip(retriever.chunks, retriever.chunk_article):
        if row >= 0:
            keys[int(row)] = article_key(chunk.bwb_id, chunk.article)
    views = []
    gold = []
    for item in items:
        v, _ = retriever.view_scores(item.question)
        views.append({name: _norm(s) for name, s in v.items()})
        gold.append({row for row, key in keys.items() if key in item.gold_keys})

    def ranks(weights, qs):
        wa, wh = weights
        out = []
        for q in qs:
            v = views[q]
            fused = v["chunk"] + wa * v["article"] + wh * v["heading"]
            top = np.argsort(-fused, kind="stable")[:100]
            r = next((i for i, d in enumerate(top, 1) if int(d) in gold[q]), None)
            out.append(r)
        return out

    def summary(rs):
        n = len(rs)
        return {
            "Hit@1": sum(1 for r in rs if r and r <= 1) / n,
            "Hit@3": sum(1 for r in rs if r and r <= 3) / n,
            "Hit@10": sum(1 for r in rs if r and r <= 10) / n,
            "MRR": sum(1 / r for r in rs if r) / n,
        }

    grid = list(itertools.product(GRID, GRID))
    everyone = list(range(len(items)))
    per_weight = {w: ranks(w, everyone) for w in grid}
    best = max(grid, key=lambda w: (summary(per_weight[w])["MRR"], -sum(w)))
    print(
        f"in-sample best weights (article, heading) = {best}: "
        + ", ".join(f"{k} {v:.3f}" for k, v in summary(per_weight[best]).items())
    )
    print("chunk view alone: " + ", ".join(f"{k} {v:.3f}" for k, v in summary(per_weight[(0.0, 0.0)]).items()))
    rng = np.random.default_rng(0)
    order = rng.permutation(len(items))
    folds = [sorted(int(i) for i in order[f :: args.folds]) for f in range(args.folds)]
    held_out: dict[int, int | None] = {}
    chosen = []
    for fold in folds:
        train = [q for q in everyone if q not in fold]
        w = max(grid, key=lambda w: (summary([per_weight[w][q] for q in train])["MRR"], -sum(w)))
        chosen.append(w)
        for q in fold:
            held_out[q] = per_weight[w][q]
    cv = summary([held_out[q] for q in everyone])
    print(f"{args.folds}-fold cross-validated: " + ", ".join(f"{k} {v:.3f}" for k, v in cv.items()))
    print("weights chosen per fold: " + ", ".join(str(w) for w in chosen))


if __name__ == "__main__":
    main()
