"""Fit the confidence model and its abstention threshold, cross-validated, and write confidence.json.

    python bench/calibrate.py INDEX [INDEX ...] [--folds 5] [--max-answerable 0.20] [--max-answerable-whole 0.05]
                              [--rows FILE] [--sweep] [--write] [--smoke]
    python bench/calibrate.py --smoke    (a tiny index built here: seconds, what tests/test_bench.py runs)

Per index, answerable questions (label 1: the corpus holds a law about them) are the question sets whose
gold laws the index holds (``bench/cross_validate.py``'s: the benchmark's dev questions, the everyday
questions, and on the whole BWB the everyday and BES questions about its other laws and the
out-of-corpus questions whose law the 2012 snapshot holds); the others are not answerable (label 0):
the out-of-corpus questions (``bench/data/out_of_corpus.jsonl``), the questions about laws enacted after
2012 (``post_2012.jsonl``) and, on an index of part of the BWB, the questions about laws it does not hold.

A logistic regression over the signals of ``wetqa.retrieval.confidence`` (standardised, L2) is fitted
inside each fold, one per pipeline kind (with the dense signals or without) and per index scale (part of
the BWB, or "@whole": 10,000 laws or more); the threshold is set so that at most ``--max-answerable`` of
the fold's answerable questions abstain, in the log-odds gap below the least sure one kept. Printed per
index and question set: the share abstained of held-out questions; with ``--write`` the models fitted on
all questions go to retrieval/confidence.json.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
from pathlib import Path

import numpy as np

from wetqa.retrieval import open_index
from wetqa.retrieval.confidence import FEATURES, capped, signals
from wetqa.retrieval.index import article_ranker, read_index_meta
from wetqa.retrieval.scope import holds_whole_bwb

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "bench" / "data"
# The two questions the issue of the first calibration quoted stay out of fitting; checked at the end.
HELD_OUT = [
    "Wanneer kan de rechter terbeschikkingstelling (tbs) opleggen?",
    "Wanneer moet ik btw betalen over een dienst?",
]


def _sets():
    spec = importlib.util.spec_from_file_location("cross_validate", ROOT / "bench" / "cross_validate.py")
    module = importlib.util.module_from_spec(spec)
    assert spec.loader is not None
    spec.loader.exec_module(module)
    return module.question_sets()


def labelled(held: set[str], smoke: bool) -> dict[str, list[tuple[str, float]]]:
    """Each question set's (question, answerable?) on an index that holds the laws ``held``."""
    sets = _sets()
    out: dict[str, list[tuple[str, float]]] = {}
    for name, qs in sets.items():
        if name == "ooc_bwb":
            continue  # its questions are among the out-of-corpus ones, labelled below
        out[name] = [(q["question"], float(q["laws"] <= held)) for q in qs]
    ooc = [json.loads(x) for x in (DATA / "out_of_corpus.jsonl").read_text(encoding="utf-8").splitlines() if x.strip()]
    out["out_of_corpus"] = [
        (r["question"], float(bool(r.get("whole_bwb")) and r["whole_bwb"] in held))
        for r in ooc
        if r["question"] not in HELD_OUT
    ]
    post = [json.loads(x) for x in (DATA / "post_2012.jsonl").read_text(encoding="utf-8").splitlines() if x.strip()]
    out["post_2012"] = [(r["question"], 0.0) for r in post]
    return {n: qs[:5] if smoke else qs for n, qs in out.items()}


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


def pipelines(path: str) -> dict[str, object]:
    """The pipelines an index is asked with: its own (dense, when it records a re-scoring model) and the
    one without dense signals."""
    raw = open_index(path, rescore=False)
    out = {"articles": article_ranker(raw, Path(path), None) or raw}
    if read_index_meta(path).get("rescore"):
        out["articles+dense"] = open_index(path)
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("index", nargs="*", help="one or more indexes (none with --smoke: a tiny one built here)")
    ap.add_argument("--folds", type=int, default=5)
    # On part of the BWB an answered question about a law it lacks cites the wrong law: the threshold may
    # refuse up to a fifth of the answerable (mostly everyday questions it ranks wrong) to refuse most of
    # those. On the whole BWB nearly every question is answerable: refusing is only a loss there.
    ap.add_argument("--max-answerable", type=float, default=0.20, help="on part of the BWB")
    ap.add_argument("--max-answerable-whole", type=float, default=0.05, help="on an index of the whole BWB")
    ap.add_argument("--l2", type=float, default=2.0)
    ap.add_argument("--write", action="store_true")
    ap.add_argument(
        "--smoke",
        action="store_true",
        help="a few questions per set (of a tiny index built here when none is given): seconds, for the test suite",
    )
    ap.add_argument(
        "--rows", type=Path, help="keep the questions' signals in this file and read them from it when it exists"
    )
    ap.add_argument("--sweep", action="store_true", help="print the abstention per set at several --max-answerable")
    from functools import partial

    import _smoke

    _smoke.main(ap, run, partial(_smoke.over_indexes, run=run, name="calibrate"), "index", "give one or more indexes")


def run(args: argparse.Namespace) -> None:
    data: dict[str, list] = {}  # model key -> rows (index, set, question, signals, label, right)
    if args.rows and args.rows.is_file():
        data = json.loads(args.rows.read_text(encoding="utf-8"))
        print(f"signals read from {args.rows}", file=sys.stderr)
    for path in [] if data else args.index:
        for kind, retriever in pipelines(path).items():
            articles = getattr(retriever, "retriever", retriever)
            held = set(articles.laws.ids)
            key = kind + ("@whole" if holds_whole_bwb(held) else "")
            for name, qs in labelled(held, args.smoke).items():
                print(f"  {Path(path).name} {key}: {name} ({len(qs)})", file=sys.stderr)
                for question, label in qs:
                    hits = retriever.search(question, 3)
                    data.setdefault(key, []).append(
                        (Path(path).name, name, question, signals(retriever, question, hits), label)
                    )
    if args.rows and not args.rows.is_file():
        args.rows.write_text(json.dumps(data), encoding="utf-8")
    if args.sweep:
        for budget in (0.03, 0.05, 0.10, 0.15, 0.20):
            print(f"\n=== --max-answerable {budget}")
            for key, rows in data.items():
                calibrate(key, rows, argparse.Namespace(**{**vars(args), "max_answerable": budget}))
        return
    out = {}
    for key, rows in data.items():
        budget = args.max_answerable_whole if key.endswith("@whole") else args.max_answerable
        out[key] = calibrate(key, rows, argparse.Namespace(**{**vars(args), "max_answerable": budget}))
    if args.write and not args.smoke:
        path = ROOT / "retrieval" / "confidence.json"
        # Merged: a refit of one index's models keeps the other index's.
        shipped = json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}
        path.write_text(json.dumps(shipped | out, indent=2) + "\n", encoding="utf-8")
        print(f"\nwrote {path}")


def _capped(rows: list, index: np.ndarray, confidence: np.ndarray) -> np.ndarray:
    """The model's confidences as ``estimate()`` gives them (a one-word or English question capped)."""
    return np.asarray([capped(rows[i][3], float(c)) for i, c in zip(index, confidence)])


def calibrate(key: str, rows: list, args) -> dict:
    features = [f for f in FEATURES if all(f in r[3] for r in rows)]
    x = np.asarray([[r[3][f] for f in features] for r in rows], dtype=np.float64)
    y = np.asarray([r[4] for r in rows])
    folds = 2 if args.smoke else args.folds
    order = np.random.default_rng(0).permutation(len(y))
    held_conf = np.zeros(len(y))
    held_abstain = np.zeros(len(y), dtype=bool)
    for f in range(folds):
        test = order[f::folds]
        train = np.setdiff1d(np.arange(len(y)), test)
        m = Model(features, x[train], y[train], args.l2)
        t = threshold_for(_capped(rows, train, m(x[train])), y[train] == 1, args.max_answerable)
        held_conf[test] = _capped(rows, test, m(x[test]))
        held_abstain[test] = (held_conf[test] < t) & ~np.asarray([bool(rows[i][3].get("named_held")) for i in test])
    final = Model(features, x, y, args.l2)
    threshold = threshold_for(_capped(rows, np.arange(len(y)), final(x)), y == 1, args.max_answerable)
    print(f"\n{key}: {len(features)} signals; {folds}-fold CV AUC (answerable or not) {auc(held_conf, y):.3f}")
    print("  coefficients (standardised): " + ", ".join(f"{f} {c:+.2f}" for f, c in zip(features, final.coef)))
    groups: dict[tuple, list[int]] = {}
    for i, r in enumerate(rows):
        groups.setdefault((r[0], r[1], int(r[4])), []).append(i)
    for (index, name, label), idx in sorted(groups.items()):
        what = "answerable" if label else "not answerable"
        print(f"  {index:14s} {name:14s} {what:15s} n={len(idx):3d}  abstained {held_abstain[idx].mean():.1%}")
    return final.spec(
        threshold,
        {"fitted_on": f"{int(y.sum())} answerable + {int((1 - y).sum())} other questions", "max_answerable": args.max_answerable,
         "cv": {"folds": folds, "auc": round(auc(held_conf, y), 4)}},
    )  # fmt: skip


if __name__ == "__main__":
    main()
