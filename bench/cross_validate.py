"""End-to-end cross-validation of the retrieval fusion and the extractive answer on the dev questions.

    python bench/cross_validate.py ARTICLES_INDEX [--dense DENSE_INDEX] [--folds 5]

Everything tuned is chosen inside each fold, on the other folds' questions only: the article
retriever's view weights (article, heading), the dense share of the re-scored top 30 (with a
dense index built from the same corpus: the vectors of the chunks, the model's query vectors),
by MRR; then the extractive paragraph ratio, by ROUGE-L. The held-out questions are answered with
the fold's choice. Prints the components one at a time, in-sample, and the cross-validated row.
"""

from __future__ import annotations

import argparse
import itertools
import json
from pathlib import Path

import numpy as np

from wetqa.dataset import article_key, load_dataset
from wetqa.evaluation.meteor import meteor
from wetqa.evaluation.rouge import rouge_l
from wetqa.generation.backends.extractive import ExtractiveBackend
from wetqa.generation.parser import parse_output
from wetqa.retrieval import Hit, open_index

ROOT = Path(__file__).resolve().parent.parent
WEIGHTS = [0.0, 0.3, 0.5, 0.7, 1.0, 1.5]
DENSE = [0.0, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 1.0]
RATIOS = [0.7, 0.9, 1.0]
DEPTH = 30


def _norm(x):
    top = float(x.max())
    return x / top if top > 0 else x


def _minmax(x):
    lo, hi = float(x.min()), float(x.max())
    return (x - lo) / (hi - lo) if hi > lo else np.ones_like(x)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("index")
    ap.add_argument("--dense", help="a dense index over the same corpus")
    ap.add_argument("--dataset", default=str(ROOT.parent / "shared" / "data" / "legalqa" / "dev.jsonl"))
    ap.add_argument("--folds", type=int, default=5)
    args = ap.parse_args()
    items = load_dataset(args.dataset)
    r = open_index(args.index, rescore=False)
    n_q = len(items)
    row_key = {}
    for c, row in zip(r.chunks, r.chunk_article):
        if row >= 0:
            row_key.setdefault(int(row), article_key(c.bwb_id, c.article))
    gold = [{row for row, k in row_key.items() if k in i.gold_keys} for i in items]
    views = []
    for i in items:
        v, _ = r.view_scores(i.question)
        views.append({n: _norm(s) for n, s in v.items()})

    dense_article = None
    if args.dense:
        from wetqa.retrieval import read_index_meta
        from wetqa.retrieval.encoders import make_encoder

        meta = read_index_meta(args.dense)
        if meta["corpus_hash"] != read_index_meta(args.index)["corpus_hash"]:
            raise SystemExit("the dense index was built from another corpus")
        vecs = np.asarray(open_index(args.dense, rescore=False).embeddings, dtype=np.float32)
        queries = make_encoder(meta["options"]).encode_queries([i.question for i in items])
        dense_article = []
        ok = r.chunk_article >= 0
        for q in queries:
            cos = vecs @ q
            best = np.full(r.n_articles, -1.0, dtype=np.float32)
            np.maximum.at(best, r.chunk_article[ok], cos[ok])
            dense_article.append(best)

    def ranking(q: int, wa: float, wh: float, wd: float) -> np.ndarray:
        v = views[q]
        fused = v["chunk"] + wa * v["article"] + wh * v["heading"]
        top = np.argsort(-fused, kind="stable")[: max(DEPTH, 10)]
        if dense_article is None or wd == 0:
            return top
        cand = top[:DEPTH]
        mixed = (1 - wd) * _minmax(fused[cand]) + wd * _minmax(dense_article[q][cand])
        return cand[np.argsort(-mixed, kind="stable")]

    def rank_of(q, order):
        return next((i for i, d in enumerate(order, 1) if int(d) in gold[q]), None)

    def metrics(ranks):
        n = len(ranks)
        return {
            "Hit@1": sum(1 for x in ranks if x == 1) / n,
            "Hit@3": sum(1 for x in ranks if x and x <= 3) / n,
            "Hit@10": sum(1 for x in ranks if x and x <= 10) / n,
            "MRR": sum(1 / x for x in ranks if x) / n,
        }

    grid = [
        (wa, wh, wd) for wa, wh in itertools.product(WEIGHTS, WEIGHTS) for wd in (DENSE if dense_article else [0.0])
    ]
    orders = {w: [ranking(q, *w) for q in range(n_q)] for w in grid}
    ranks = {w: [rank_of(q, orders[w][q]) for q in range(n_q)] for w in grid}

    # Answers depend on the top article and the paragraph ratio only.
    chunks_of_row: dict[int, list] = {}
    for c, row in zip(r.chunks, r.chunk_article):
        if row >= 0:
            chunks_of_row.setdefault(int(row), []).append(c)
    answer_cache: dict[tuple, str] = {}

    def answer(q: int, row: int, ratio: float) -> str:
        key = (q, row, ratio)
        if key not in answer_cache:
            parts = tuple(chunks_of_row[row])
            hit = Hit(parts[0], 1.0, 1, "articles", parts, r.chunks.paragraphs([int(r.ranked_row[row])])[0])
            raw = ExtractiveBackend(paragraph_ratio=ratio).answer(items[q].question, [hit])
            answer_cache[key] = parse_output(raw, [c.doc_id for c in parts]).answer
        return answer_cache[key]

    def rouge(q: int, row: int, ratio: float) -> float:
        return rouge_l(answer(q, row, ratio), items[q].answer).fmeasure

    def show(label, w, ratio=1.0):
        m = metrics(ranks[w])
        rl = np.mean([rouge(q, int(orders[w][q][0]), ratio) for q in range(n_q)])
        print(f"{label:44s} " + "  ".join(f"{k} {v:.3f}" for k, v in m.items()) + f"  ROUGE-L {rl:.3f}")

    print(f"{n_q} questions; in-sample rows:")
    show("chunk view (max of chunk BM25)", (0.0, 0.0, 0.0))
    show("+ whole-article view (w=1.0)", (1.0, 0.0, 0.0))
    show("+ heading view (1.0, 0.5)", (1.0, 0.5, 0.0))
    show("articles default (1.5, 0.7)", (1.5, 0.7, 0.0))
    if dense_article is not None:
        dense_only = [np.argsort(-dense_article[q], kind="stable")[:10] for q in range(n_q)]
        d_ranks = [rank_of(q, dense_only[q]) for q in range(n_q)]
        print(
            f"{'dense alone (full corpus, article max cos)':44s} "
            + "  ".join(f"{k} {v:.3f}" for k, v in metrics(d_ranks).items())
        )
        best_d = max((w for w in grid if w[:2] == (1.5, 0.7)), key=lambda w: metrics(ranks[w])["MRR"])
        show(f"articles + dense re-scoring {best_d}", best_d)
    best = max(grid, key=lambda w: (metrics(ranks[w])["MRR"], -sum(w)))
    show(f"in-sample best {best}", best)

    order = np.random.default_rng(0).permutation(n_q)
    held_ranks, held_rouge, held_meteor, held_recall, chosen = [None] * n_q, [0.0] * n_q, [0.0] * n_q, [0.0] * n_q, []
    for f in range(args.folds):
        test = [int(q) for q in order[f :: args.folds]]
        train = [q for q in range(n_q) if q not in test]
        w = max(grid, key=lambda w: (metrics([ranks[w][q] for q in train])["MRR"], -sum(w)))
        ratio = max(RATIOS, key=lambda x: (np.mean([rouge(q, int(orders[w][q][0]), x) for q in train]), x))
        chosen.append((w, ratio))
        for q in test:
            held_ranks[q] = ranks[w][q]
            top = int(orders[w][q][0])
            held_rouge[q] = rouge(q, top, ratio)
            held_meteor[q] = meteor(answer(q, top, ratio), items[q].answer)
            # The extractive answer cites one article, its top hit: citation P = Hit = Hit@1; R = 1/|gold| if right.
            held_recall[q] = (1 / len(items[q].gold_keys)) if top in gold[q] else 0.0
    m = metrics(held_ranks)
    print(
        f"{args.folds}-fold cross-validated: "
        + "  ".join(f"{k} {v:.3f}" for k, v in m.items())
        + f"  ROUGE-L {np.mean(held_rouge):.3f}  METEOR {np.mean(held_meteor):.3f}"
        + f"  citation P/Hit {m['Hit@1']:.3f} R {np.mean(held_recall):.3f}"
    )
    print("chosen per fold (article, heading, dense), ratio: " + json.dumps(chosen))


if __name__ == "__main__":
    main()
