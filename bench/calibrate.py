"""Fit the confidence model and its abstention threshold, cross-validated, and write confidence.json.

    python bench/calibrate.py INDEX [--rescore MODEL] [--folds 5] [--write]

Questions: the 51 dev questions (label: is the first article a gold article) and the questions about
laws outside the corpus in bench/data/out_of_corpus.jsonl (label 0: no article in the corpus answers
them). A logistic regression over the signals of ``wetqa.retrieval.confidence`` (standardised, L2
penalty) is fitted inside each fold; the threshold is the highest one at which at most ``--max-dev``
(5%) of the fold's training dev questions abstain. Printed: cross-validated AUC, the abstention rate on
held-out dev and out-of-corpus questions, a risk-coverage table; with ``--write`` the models fitted on
all questions (one with the dense signals, one without) go to retrieval/confidence.json.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

from wetqa.dataset import article_key, load_dataset
from wetqa.retrieval import open_index, open_retriever
from wetqa.retrieval.confidence import FEATURES, signals

ROOT = Path(__file__).resolve().parent.parent
DEV = ROOT.parent / "shared" / "data" / "legalqa" / "dev.jsonl"
OOC = ROOT / "bench" / "data" / "out_of_corpus.jsonl"
# The two questions the issue quotes stay out of fitting; they are checked at the end.
HELD_OUT = [
    "Wanneer kan de rechter terbeschikkingstelling (tbs) opleggen?",
    "Wanneer moet ik btw betalen over een dienst?",
]


def fit(x: np.ndarray, y: np.ndarray, l2: float = 1.0, iterations: int = 50) -> tuple[np.ndarray, float]:
    """L2-penalised logistic regression by Newton's method (the intercept unpenalised)."""
    n, d = x.shape
    a = np.hstack([x, np.ones((n, 1))])
    w = np.zeros(d + 1)
    penalty = np.diag([l2] * d + [0.0])
    for _ in range(iterations):
        p = 1 / (1 + np.exp(-(a @ w)))
        grad = a.T @ (p - y) + penalty @ w
        hess = a.T @ (a * (p * (1 - p))[:, None]) + penalty + 1e-9 * np.eye(d + 1)
        step = np.linalg.solve(hess, grad)
        w -= step
        if np.abs(step).max() < 1e-8:
            break
    return w[:d], float(w[d])


def auc(scores: np.ndarray, labels: np.ndarray) -> float:
    pos, neg = scores[labels == 1], scores[labels == 0]
    if not len(pos) or not len(neg):
        return float("nan")
    return float(np.mean([(p > neg).mean() + 0.5 * (p == neg).mean() for p in pos]))


def threshold_for(conf: np.ndarray, is_dev: np.ndarray, max_dev: float) -> float:
    """A threshold at which at most ``max_dev`` of the dev questions fall below it.

    Not at the lowest dev question kept (a held-out dev question a little less sure would abstain) but
    in the middle, on the log-odds scale, of the gap below it: between that question and the next
    surer question of either kind beneath it.
    """
    dev = np.sort(conf[is_dev])
    allowed = int(np.floor(max_dev * len(dev)))
    if allowed >= len(dev):
        return 1.0
    keep = float(dev[allowed])
    below = conf[conf < keep]
    if not len(below):
        return keep

    def logit(p: float) -> float:
        p = min(max(p, 1e-9), 1 - 1e-9)
        return float(np.log(p / (1 - p)))

    mid = (logit(keep) + logit(float(below.max()))) / 2
    return float(1 / (1 + np.exp(-mid)))


class Model:
    def __init__(self, features: list[str], x: np.ndarray, y: np.ndarray, l2: float):
        self.features = features
        self.mean, self.std = x.mean(0), x.std(0) + 1e-9
        self.coef, self.intercept = fit((x - self.mean) / self.std, y, l2)

    def __call__(self, x: np.ndarray) -> np.ndarray:
        return 1 / (1 + np.exp(-(((x - self.mean) / self.std) @ self.coef + self.intercept)))

    def spec(self, threshold: float, extra: dict) -> dict:
        return {
            "features": self.features,
            "mean": [round(float(v), 6) for v in self.mean],
            "std": [round(float(v), 6) for v in self.std],
            "coef": [round(float(v), 6) for v in self.coef],
            "intercept": round(self.intercept, 6),
            "threshold": round(threshold, 4),
            **extra,
        }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("index", nargs="?", help="an articles index (none with --smoke)")
    ap.add_argument("--rescore", help="re-scoring model (default: what the index records)")
    ap.add_argument("--folds", type=int, default=5)
    ap.add_argument("--max-dev", type=float, default=0.05)
    ap.add_argument("--l2", type=float, default=2.0)
    ap.add_argument("--write", action="store_true")
    ap.add_argument(
        "--label",
        choices=("right", "answerable"),
        default="right",
        help="what the model predicts: the first article is right (dev), or the corpus holds the answer",
    )
    ap.add_argument("--smoke", action="store_true", help="a few questions over a tiny index built here (seconds)")
    args = ap.parse_args()
    if args.smoke:
        return smoke(args)
    if not args.index:
        ap.error("give the articles index")
    dev = load_dataset(DEV)
    ooc = [json.loads(line) for line in OOC.read_text(encoding="utf-8").splitlines() if line.strip()]
    calibrate(args, dev, ooc)


def smoke(args: argparse.Namespace) -> None:
    import tempfile

    import _smoke

    if args.write:
        raise SystemExit("--smoke writes no confidence.json")
    _smoke.announce()
    with tempfile.TemporaryDirectory() as tmp:
        args.index, args.folds = str(_smoke.index(Path(tmp))), 2
        calibrate(args, load_dataset(_smoke.dataset(Path(tmp) / "dev.jsonl")), _smoke.out_of_corpus())


def calibrate(args: argparse.Namespace, dev: list, ooc: list[dict]) -> None:
    retrievers = {
        "articles+dense": open_retriever([args.index], rescore=args.rescore),
        "articles": open_index(args.index, rescore=False),
    }
    questions = [(i.question, i.gold_keys, True) for i in dev] + [(q["question"], set(), False) for q in ooc]
    out = {}
    for kind, retriever in retrievers.items():
        rows, labels, is_dev, is_right = [], [], [], []
        for question, gold, in_dev in questions:
            hits = retriever.search(question, 30)
            values = signals(retriever, question, hits)
            rows.append(values)
            top = hits[0] if hits else None
            right = top is not None and article_key(top.chunk.bwb_id, top.chunk.article) in gold
            labels.append(1.0 if (right if args.label == "right" else in_dev) else 0.0)
            is_dev.append(in_dev)
            is_right.append(right)
        features = [f for f in FEATURES if all(f in r for r in rows)]
        x = np.asarray([[r[f] for f in features] for r in rows], dtype=np.float64)
        y, dev_mask, right_mask = np.asarray(labels), np.asarray(is_dev), np.asarray(is_right)
        # Folds: dev and out-of-corpus questions spread evenly.
        order = np.random.default_rng(0).permutation(len(y))
        folds = [order[f :: args.folds] for f in range(args.folds)]
        held_conf = np.zeros(len(y))
        held_abstain = np.zeros(len(y), dtype=bool)
        for test in folds:
            train = np.setdiff1d(np.arange(len(y)), test)
            m = Model(features, x[train], y[train], args.l2)
            t = threshold_for(m(x[train]), dev_mask[train], args.max_dev)
            held_conf[test] = m(x[test])
            held_abstain[test] = held_conf[test] < t
        final = Model(features, x, y, args.l2)
        threshold = threshold_for(final(x), dev_mask, args.max_dev)
        print(f"\n{kind}: {len(features)} signals {features}")
        print("  coefficients (standardised): " + ", ".join(f"{f} {c:+.2f}" for f, c in zip(features, final.coef)))
        print(f"  {args.folds}-fold CV AUC (the label, {args.label}): {auc(held_conf, y):.3f}")
        print(
            f"  CV abstention: dev {held_abstain[dev_mask].mean():.1%} ({held_abstain[dev_mask].sum()}/{dev_mask.sum()}), "
            f"out of corpus {held_abstain[~dev_mask].mean():.1%} ({held_abstain[~dev_mask].sum()}/{(~dev_mask).sum()})"
        )
        for i in np.flatnonzero(held_abstain & dev_mask):
            print(
                f"  abstains (dev, first article {'right' if right_mask[i] else 'wrong'}): {held_conf[i]:.3f} {questions[i][0]}"
            )
        answered_right = (~held_abstain & right_mask).sum()
        print(
            f"  dev answered with a right first article {answered_right}/{dev_mask.sum()}; "
            f"abstained dev questions whose first article was wrong: {(held_abstain & dev_mask & ~right_mask).sum()}"
        )
        print(f"  AUC first article right vs not (CV confidence): {auc(held_conf, right_mask.astype(float)):.3f}")
        print("  risk-coverage (CV confidence, dev + out of corpus; risk = answered with a wrong first article):")
        print("    | coverage | risk | dev answered | out of corpus answered | confidence >= |")
        order_c = np.argsort(-held_conf, kind="stable")
        for cov in (1.0, 0.9, 0.8, 0.7, 0.6, 0.5, 0.4, 0.3):
            n = max(1, int(round(cov * len(y))))
            picked = order_c[:n]
            print(
                f"    | {cov:.0%} | {1 - right_mask[picked].mean():.3f} | {dev_mask[picked].sum()}/{dev_mask.sum()} "
                f"| {(~dev_mask[picked]).sum()}/{(~dev_mask).sum()} | {held_conf[picked].min():.3f} |"
            )
        for q in HELD_OUT:
            hits = retriever.search(q, 30)
            values = signals(retriever, q, hits)
            p = float(final(np.asarray([[values[f] for f in features]]))[0])
            print(f"  held-out example: {q!r}: confidence {p:.3f} -> {'abstains' if p < threshold else 'answers'}")
        out[kind] = final.spec(
            threshold,
            {
                "fitted_on": f"{int(dev_mask.sum())} dev + {int((~dev_mask).sum())} out-of-corpus questions",
                "label": args.label,
                "max_dev": args.max_dev,
                "cv": {
                    "folds": args.folds,
                    "auc": round(auc(held_conf, y), 4),
                    "dev_abstained": round(float(held_abstain[dev_mask].mean()), 4),
                    "out_of_corpus_abstained": round(float(held_abstain[~dev_mask].mean()), 4),
                },
            },
        )
    if args.write:
        path = ROOT / "retrieval" / "confidence.json"
        path.write_text(json.dumps(out, indent=2) + "\n", encoding="utf-8")
        print(f"\nwrote {path}")


if __name__ == "__main__":
    main()
