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
from wetqa.retrieval.structure import lead_overlap, question_terms

ROOT = Path(__file__).resolve().parent.parent
WEIGHTS = [0.0, 0.3, 0.5, 0.7, 1.0, 1.5]
DENSE = [0.0, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 1.0]
RATIOS = [0.7, 0.9, 1.0]
# The second article is quoted too when its fused score is within this share of the first's (0: never).
GAPS = [0.0, 0.02, 0.03, 0.05, 0.07, 0.1, 0.15]
# The weight of the announcing clause's overlap with the question (wetqa.retrieval.structure).
LEADS = [0.0, 0.1, 0.2, 0.3, 0.5, 0.8]
DEPTH = 30


def _norm(x):
    top = float(x.max())
    return x / top if top > 0 else x


def _minmax(x):
    lo, hi = float(x.min()), float(x.max())
    return (x - lo) / (hi - lo) if hi > lo else np.ones_like(x)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("index", nargs="?", help="an articles index (none with --smoke)")
    ap.add_argument("--dense", help="a dense index over the same corpus")
    ap.add_argument("--dataset", default=str(ROOT.parent / "shared" / "data" / "legalqa" / "dev.jsonl"))
    ap.add_argument("--folds", type=int, default=5)
    ap.add_argument("--smoke", action="store_true", help="a few questions over a tiny index built here (seconds)")
    args = ap.parse_args()
    if args.smoke:
        return smoke(args)
    if not args.index:
        ap.error("give the articles index")
    cross_validate(args)


def smoke(args: argparse.Namespace) -> None:
    import tempfile

    import _smoke

    _smoke.announce("a dense index of a tiny random model")
    with tempfile.TemporaryDirectory() as tmp:
        args.index, args.folds = str(_smoke.index(Path(tmp))), 2
        args.dense = str(_smoke.dense_index(Path(tmp)))
        args.dataset = str(_smoke.dataset(Path(tmp) / "dev.jsonl"))
        cross_validate(args)


def cross_validate(args: argparse.Namespace) -> None:
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

    terms = [question_terms(i.question, r.analyzer.tokens) for i in items]
    lead_cache: dict[tuple[int, int], float] = {}

    def lead(q: int, rows: np.ndarray) -> np.ndarray:
        for row in rows:
            if (q, int(row)) not in lead_cache:
                paragraphs = r.chunks.paragraphs([int(r.ranked_row[int(row)])])[0]
                lead_cache[q, int(row)] = lead_overlap(terms[q], paragraphs, r.analyzer.tokens)
        return np.asarray([lead_cache[q, int(row)] for row in rows], dtype=np.float32)

    def ranking(q: int, wa: float, wh: float, wd: float, wl: float = 0.0) -> tuple[np.ndarray, np.ndarray]:
        """The ranked article rows and their scores (as the pipeline's hits carry them)."""
        v = views[q]
        fused = v["chunk"] + wa * v["article"] + wh * v["heading"]
        top = np.argsort(-fused, kind="stable")[: max(DEPTH, 10)]
        if dense_article is None or wd == 0:
            if wl == 0:
                return top, fused[top]
            cand = top[:DEPTH]
            mixed = _minmax(fused[cand]) + wl * lead(q, cand)
            by = np.argsort(-mixed, kind="stable")
            return cand[by], mixed[by]
        cand = top[:DEPTH]
        mixed = (1 - wd) * _minmax(fused[cand]) + wd * _minmax(dense_article[q][cand])
        if wl:
            mixed = mixed + wl * lead(q, cand)
        by = np.argsort(-mixed, kind="stable")
        return cand[by], mixed[by]

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
        (wa, wh, wd, wl)
        for wa, wh in itertools.product(WEIGHTS, WEIGHTS)
        for wd in (DENSE if dense_article else [0.0])
        for wl in LEADS
    ]
    ranked = {w: [ranking(q, *w) for q in range(n_q)] for w in grid}
    orders = {w: [o for o, _ in ranked[w]] for w in grid}
    scores = {w: [sc for _, sc in ranked[w]] for w in grid}
    ranks = {w: [rank_of(q, orders[w][q]) for q in range(n_q)] for w in grid}

    # Answers depend on the top article and the paragraph ratio only.
    chunks_of_row: dict[int, list] = {}
    for c, row in zip(r.chunks, r.chunk_article):
        if row >= 0:
            chunks_of_row.setdefault(int(row), []).append(c)
    answer_cache: dict[tuple, str] = {}

    def answer(q: int, row: int, ratio: float, second: int | None = None) -> str:
        """The extractive answer from the article ``row`` (and the article ``second`` after it)."""
        key = (q, row, ratio, second)
        if key not in answer_cache:
            hits, ids = [], []
            for rank, article in enumerate([row] if second is None else [row, second], 1):
                parts = tuple(chunks_of_row[article])
                paragraphs = r.chunks.paragraphs([int(r.ranked_row[article])])[0]
                hits.append(Hit(parts[0], 1.0, rank, "articles", parts, paragraphs))
                ids += [c.doc_id for c in parts]
            gap = 0.0 if second is None else 1.0
            raw = ExtractiveBackend(paragraph_ratio=ratio, second_article_gap=gap).answer(items[q].question, hits)
            answer_cache[key] = parse_output(raw, ids).answer
        return answer_cache[key]

    def cited(q: int, w, gap: float) -> list[int]:
        """The article rows the answer cites: the first, and the second when its score is within ``gap``."""
        order, sc = orders[w][q], scores[w][q]
        rows = [int(order[0])]
        if gap > 0 and len(order) > 1 and sc[1] >= (1 - gap) * sc[0]:
            rows.append(int(order[1]))
        return rows

    def citation_scores(q: int, rows: list[int]) -> tuple[float, float, float]:
        """Citation P, R, Hit of the cited article rows (the gold counted as article keys)."""
        keys = {row_key[row] for row in rows}
        right = keys & items[q].gold_keys
        return len(right) / len(keys), len(right) / len(items[q].gold_keys), float(bool(right))

    def text_of(q: int, rows: list[int], ratio: float) -> str:
        return answer(q, rows[0], ratio, rows[1] if len(rows) > 1 else None)

    def rouge(q: int, row: int, ratio: float) -> float:
        return rouge_l(answer(q, row, ratio), items[q].answer).fmeasure

    def show(label, w, ratio=1.0):
        m = metrics(ranks[w])
        rl = np.mean([rouge(q, int(orders[w][q][0]), ratio) for q in range(n_q)])
        print(f"{label:44s} " + "  ".join(f"{k} {v:.3f}" for k, v in m.items()) + f"  ROUGE-L {rl:.3f}")

    print(f"{n_q} questions; in-sample rows:")
    show("chunk view (max of chunk BM25)", (0.0, 0.0, 0.0, 0.0))
    show("+ whole-article view (w=1.0)", (1.0, 0.0, 0.0, 0.0))
    show("+ heading view (1.0, 0.5)", (1.0, 0.5, 0.0, 0.0))
    show("articles default (1.5, 0.7)", (1.5, 0.7, 0.0, 0.0))
    show("articles default + announcing clause (0.3)", (1.5, 0.7, 0.0, 0.3))
    if dense_article is not None:
        dense_only = [np.argsort(-dense_article[q], kind="stable")[:10] for q in range(n_q)]
        d_ranks = [rank_of(q, dense_only[q]) for q in range(n_q)]
        print(
            f"{'dense alone (full corpus, article max cos)':44s} "
            + "  ".join(f"{k} {v:.3f}" for k, v in metrics(d_ranks).items())
        )
        best_d = max((w for w in grid if w[:2] == (1.5, 0.7) and w[3] == 0), key=lambda w: metrics(ranks[w])["MRR"])
        show(f"articles + dense re-scoring {best_d}", best_d)
        best_l = max((w for w in grid if w[:3] == best_d[:3]), key=lambda w: metrics(ranks[w])["MRR"])
        show(f"+ announcing clause {best_l}", best_l)
    best = max(grid, key=lambda w: (metrics(ranks[w])["MRR"], -sum(w)))
    show(f"in-sample best {best}", best)

    order = np.random.default_rng(0).permutation(n_q)
    held = {name: [0.0] * n_q for name in ("ROUGE-L", "METEOR", "P", "R", "Hit", "P1", "R1", "METEOR1", "ROUGE1")}
    held_ranks, chosen = [None] * n_q, []
    for f in range(args.folds):
        test = [int(q) for q in order[f :: args.folds]]
        train = [q for q in range(n_q) if q not in test]
        w = max(grid, key=lambda w: (metrics([ranks[w][q] for q in train])["MRR"], -sum(w)))
        ratio = max(RATIOS, key=lambda x: (np.mean([rouge(q, int(orders[w][q][0]), x) for q in train]), x))

        def gain(gap: float, w=w, train=train, ratio=ratio) -> tuple:
            # Recall and METEOR may rise; precision must not fall below the single article's.
            cs = np.asarray([citation_scores(q, cited(q, w, gap)) for q in train])
            met = np.mean([meteor(text_of(q, cited(q, w, gap), ratio), items[q].answer) for q in train])
            return (round(float(cs[:, 0].mean() + cs[:, 1].mean()), 6), met, -gap)

        gap = max(GAPS, key=gain)
        chosen.append((w, ratio, gap))
        for q in test:
            held_ranks[q] = ranks[w][q]
            top = int(orders[w][q][0])
            rows = cited(q, w, gap)
            text = text_of(q, rows, ratio)
            held["ROUGE-L"][q] = rouge_l(text, items[q].answer).fmeasure
            held["METEOR"][q] = meteor(text, items[q].answer)
            held["P"][q], held["R"][q], held["Hit"][q] = citation_scores(q, rows)
            held["ROUGE1"][q] = rouge(q, top, ratio)
            held["METEOR1"][q] = meteor(answer(q, top, ratio), items[q].answer)
            held["P1"][q], held["R1"][q], _ = citation_scores(q, [top])
    m = metrics(held_ranks)
    mean = {k: float(np.mean(v)) for k, v in held.items()}
    print(
        f"{args.folds}-fold cross-validated, first article only: "
        + "  ".join(f"{k} {v:.3f}" for k, v in m.items())
        + f"  ROUGE-L {mean['ROUGE1']:.3f}  METEOR {mean['METEOR1']:.3f}"
        + f"  citation P/Hit {mean['P1']:.3f} R {mean['R1']:.3f}"
    )
    print(
        f"{args.folds}-fold cross-validated, with the second article when close (the default): "
        + f"ROUGE-L {mean['ROUGE-L']:.3f}  METEOR {mean['METEOR']:.3f}"
        + f"  citation P {mean['P']:.3f} R {mean['R']:.3f} Hit {mean['Hit']:.3f}"
    )
    print(
        "chosen per fold (article, heading, dense, announcing clause), ratio, second-article gap: " + json.dumps(chosen)
    )


if __name__ == "__main__":
    main()
