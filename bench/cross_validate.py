"""Cross-validated ranking and answers: the benchmark's dev questions and the everyday questions, on the
272 laws and on the whole BWB, measured on questions held out of fitting.

    python bench/cross_validate.py INDEX [INDEX ...] [--folds 5] [--write] [--per-question FILE] [--smoke]
    python bench/cross_validate.py --smoke    (a tiny index built here: seconds, what tests/test_bench.py runs)

Every question's candidates and features come from the pipeline's own code
(``wetqa.retrieval.ranking.CandidateFeatures``), once with the dense signals (the index's re-scoring model
and passage vectors, else its vector cache) and once without. One model per pipeline kind and index scale
(an index of the whole BWB has its own, ``@whole``: its candidates differ in kind and, without passage
vectors, come without a dense first stage). Inside each fold a linear ranking model (softmax over each
question's candidates, L2) is fitted on the other folds' questions of every set of that scale, and the
extractive answer's paragraph ratio chosen by ROUGE-L on their dev questions; the held-out questions are
ranked and answered with the fold's choice. Printed per index and question set: article Hit@1 / Hit@3 /
MRR and law Hit@1 of the first article; for the dev questions also ROUGE-L, METEOR and citation P / R /
Hit of the extractive answer (the published table's row). ``--write`` writes the models fitted on all
questions to ``retrieval/ranking.json``; ``--per-question FILE`` writes every held-out question's result as
a JSON line (model, index, set, question, gold, the first article and its law, the gold's rank), for error
analysis.

Question sets (``bench/data``): ``dev`` (the benchmark's 51, gold in the 272 laws), ``everyday``
(questions as people ask them, gold in the 272 laws), ``everyday_bwb`` and ``bes`` (gold only in the
whole BWB), ``ooc_bwb`` (the out-of-corpus questions whose law the 2012 snapshot holds: law-level gold).
A set is used on an index that holds its gold laws.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import pickle
import sys
from pathlib import Path

import numpy as np

from wetqa.corpus.dataset import article_key, load_dataset
from wetqa.corpus.sources import law_id_of
from wetqa.retrieval import open_index, read_index_meta
from wetqa.retrieval.ranking import DENSE_FEATURES, FEATURES, RELATION_FEATURES, CandidateFeatures
from wetqa.retrieval.scope import holds_whole_bwb

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "bench" / "data"
DEV = ROOT.parent / "shared" / "data" / "legalqa" / "dev.jsonl"
RATIOS = [0.7, 0.9, 1.0]
L2 = 1.0


def question_sets() -> dict[str, list[dict]]:
    """Each set's questions: id, question, gold article keys (may be empty) and gold BWB ids."""
    sets: dict[str, list[dict]] = {}
    sets["dev"] = [
        {"id": f"dev-{i.id}", "question": i.question, "answer": i.answer, "gold": i.gold_keys,
         "laws": {a.law_id for a in i.articles}}
        for i in load_dataset(DEV)
    ]  # fmt: skip
    for name in ("everyday", "everyday_bwb", "bes"):
        rows = [json.loads(x) for x in (DATA / f"{name}.jsonl").read_text(encoding="utf-8").splitlines() if x.strip()]
        sets[name] = [
            {"id": r["id"], "question": r["question"], "answer": "",
             "gold": {article_key(law_id_of(a), a["article"]) for a in r["articles"]},
             "laws": {law_id_of(a) for a in r["articles"]}}
            for r in rows
        ]  # fmt: skip
    ooc = [json.loads(x) for x in (DATA / "out_of_corpus.jsonl").read_text(encoding="utf-8").splitlines() if x.strip()]
    sets["ooc_bwb"] = [
        {"id": r["id"], "question": r["question"], "answer": "", "gold": set(), "laws": {r["whole_bwb"]}}
        for r in ooc
        if r.get("whole_bwb")
    ]
    return sets


class Prepared:
    """One index's candidates for every question it can answer, with and without the dense signals."""

    def __init__(self, path: str, sets: dict[str, list[dict]], limit: int | None = None, cached: bool = True):
        self.path = path
        self.articles = open_index(path, rescore=False)
        self.model = (read_index_meta(path).get("rescore") or {}).get("model")
        held = set(self.articles.laws.ids)
        self.sets = {name: [q for q in qs if q["laws"] <= held][:limit] for name, qs in sets.items()}
        self.sets = {name: qs for name, qs in self.sets.items() if qs}
        meta = read_index_meta(path)
        key = json.dumps(
            [meta["corpus_hash"], meta.get("rescore"), {n: [q["id"] for q in qs] for n, qs in self.sets.items()},
             _code_fingerprint(), meta.get("files")]
        )  # fmt: skip
        # meta["files"]: every file's hash, so two indexes of one corpus (vectors of other kinds kept, or none)
        # never share candidates.
        cache = Path.home() / ".cache" / "wetqa" / "bench" / f"cv-{hashlib.sha1(key.encode()).hexdigest()[:16]}.pkl"
        if cached and cache.is_file():
            self.cands = pickle.loads(cache.read_bytes())
        else:
            self.cands = self._prepare()
            if cached:  # a smoke run computes them each time: running that code is its point
                cache.parent.mkdir(parents=True, exist_ok=True)
                cache.write_bytes(pickle.dumps(self.cands))
        self.key_of = {}  # ranked article -> (article key, bwb id)
        for name in self.cands:
            for kind in self.cands[name]:
                for c in kind:
                    if c is not None:
                        self._keys(c.articles)

    def _prepare(self) -> dict:
        from wetqa.retrieval.index import dense_parts

        with_dense = None
        if self.model:
            encoder, cache, passages = dense_parts(self.articles, Path(self.path), self.model)
            with_dense = CandidateFeatures(self.articles, passages, encoder, cache)
        plain = CandidateFeatures(self.articles)
        out = {}
        for name, qs in self.sets.items():
            print(f"  {Path(self.path).name}: {name} ({len(qs)} questions)", file=sys.stderr)
            questions = [q["question"] for q in qs]
            vectors = with_dense.query_vectors(questions) if with_dense else None
            dense = [
                with_dense.candidates(q, self.articles.allowed(None, q), vectors[i]) if with_dense else None
                for i, q in enumerate(questions)
            ]
            out[name] = (dense, [plain.candidates(q, self.articles.allowed(None, q), None) for q in questions])
        return out

    def _keys(self, articles: np.ndarray) -> None:
        a = self.articles
        missing = [int(x) for x in articles if int(x) not in self.key_of]
        for x, chunk in zip(missing, a.chunks.rows([int(a.first[x]) for x in missing])):
            self.key_of[x] = (article_key(chunk.law_id, chunk.article), chunk.law_id)


def _code_fingerprint() -> str:
    """The retrieval code's own hash: candidates cached by an older ranking are not this one's."""
    folder = ROOT / "retrieval"
    digest = hashlib.sha1()
    for path in sorted([*folder.glob("*.py"), *folder.glob("*.tsv")]):
        digest.update(path.name.encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()


def _labels(prep: Prepared, q: dict, c) -> tuple[np.ndarray, np.ndarray]:
    keys = [prep.key_of[int(x)] for x in c.articles]
    return np.asarray([k in q["gold"] for k, _ in keys]), np.asarray([b in q["laws"] for _, b in keys])


def fit(rows: list[tuple], l2: float = L2, iterations: int = 400) -> np.ndarray:
    """Softmax over each question's candidates towards its gold ones (L2), by gradient descent; rows are
    (features, gold, weight): each question set weighs the same in all (:func:`set_weights`)."""
    d = rows[0][0].shape[1]
    w = np.zeros(d)
    step = 0.5
    total = sum(r[2] for r in rows)
    for _ in range(iterations):
        grad = np.zeros(d)
        for x, y, weight in rows:
            s = x @ w
            p = np.exp(s - s.max())
            p /= p.sum()
            grad += weight * (x.T @ (p - y / y.sum()))
        w -= step * (grad / total + l2 * w / total)
    return w


def set_weights(names: list[str]) -> list[float]:
    """A weight per question so that every question set (and index) weighs the same: the benchmark's 51
    questions as much as the 164 everyday ones."""
    from collections import Counter

    counts = Counter(names)
    return [len(names) / (len(counts) * counts[n]) for n in names]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("index", nargs="*", help="one or more indexes (none with --smoke: a tiny one built here)")
    ap.add_argument("--folds", type=int, default=5)
    ap.add_argument("--write", action="store_true", help="write the models fitted on all questions")
    ap.add_argument("--per-question", type=Path, help="write each held-out question's result to this JSONL file")
    ap.add_argument(
        "--smoke",
        action="store_true",
        help="a few questions per set (of a tiny index built here when none is given): seconds, for the test suite",
    )
    from functools import partial

    import _smoke

    smoke = partial(_smoke.over_indexes, run=run, name="cross-validate")
    _smoke.main(ap, run, smoke, "index", "give one or more indexes")


def run(args: argparse.Namespace) -> None:
    if args.per_question and not args.per_question.resolve().parent.is_dir():
        # Checked before the run, not after it: a run of minutes is not lost to a mistyped folder.
        sys.exit(f"cross_validate.py: error: --per-question: no folder {args.per_question.resolve().parent}")
    sets = question_sets()
    preps = [Prepared(p, sets, limit=6 if args.smoke else None, cached=not args.smoke) for p in args.index]
    folds = 2 if args.smoke else args.folds
    qids = sorted({q["id"] for p in preps for qs in p.sets.values() for q in qs})
    fold_of = {qid: i % folds for i, qid in enumerate(np.random.default_rng(0).permutation(qids))}
    models = {}
    lines: list[str] = []
    for kind, features in (
        ("articles+dense", list(FEATURES)),
        ("articles", [f for f in FEATURES if f not in DENSE_FEATURES]),
    ):
        slot = 0 if kind == "articles+dense" else 1
        # One model per index scale: the whole BWB's candidates differ in kind (decrees, regulations, BES
        # twins) and come from another dense first stage (the formal laws' passages, not all). The model
        # without dense signals for a part of the BWB is still fitted on every index's questions: fitted on
        # the 272 laws' alone it ranked their dev questions better (Hit@1 .804 against .765) but refused
        # far fewer questions outside the corpus (37.8% against 48.8% at the same budget).
        by_scale: dict[str, list] = {}  # model key -> examples (fold, prep, set, question, candidates)
        for p in preps:
            whole = holds_whole_bwb(p.articles.laws.held)
            keys = [kind + "@whole"] if whole else [kind]
            if whole and kind == "articles":
                keys.append(kind)
            for name, qs in p.sets.items():
                for q, c in zip(qs, p.cands[name][slot]):
                    if c is not None:  # an index without a re-scoring model has no dense candidates
                        for key in keys:
                            by_scale.setdefault(key, []).append((fold_of[q["id"]], p, name, q, c))
        for key, examples in by_scale.items():
            # Decrees beside the laws they rest on meet only among the whole BWB's kinds (the 272 laws are
            # all formal laws). In the general model fitted on both corpora the relations cost the 272
            # laws' out-of-corpus questions 5 points of abstention (48.8% to 43.9%, CV): left out there.
            used = features if key.endswith("@whole") else [f for f in features if f not in RELATION_FEATURES]
            held = cross_validated(examples, used, folds)
            report(key, held)
            lines += per_question(key, held)
            weights = fit(_rows(examples, used))
            models[key] = {"features": used, "weights": [round(float(v), 5) for v in weights],
                           "fitted_on": f"{len(examples)} questions over {len({e[1].path for e in examples})} "
                                        "index(es)", "l2": L2}  # fmt: skip
            print("  weights: " + ", ".join(f"{f} {v:+.2f}" for f, v in zip(used, weights)))
    if args.per_question:
        # Written whole after the run (a temporary file renamed): an interrupted run leaves the old file.
        tmp = args.per_question.with_name(args.per_question.name + ".tmp")
        tmp.write_text("".join(lines), encoding="utf-8")
        tmp.replace(args.per_question)
        print(f"wrote {len(lines)} question results to {args.per_question}")
    if args.write and not args.smoke:
        path = ROOT / "retrieval" / "ranking.json"
        # Merged: a refit of one index scale keeps the other scale's models.
        shipped = json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}
        path.write_text(json.dumps(shipped | models, indent=2) + "\n", encoding="utf-8")
        print(f"wrote {path}")


def cross_validated(examples: list[tuple], features: list[str], folds: int) -> dict[tuple, list]:
    """Each question ranked (and its dev answer chosen) by the model fitted on the other folds."""
    held: dict[tuple, list] = {}
    answers = Answers()
    for f in range(folds):
        w = fit(_rows([e for e in examples if e[0] != f], features)) if folds > 1 else np.zeros(len(features))
        tops = {(p.path, q["id"]): _evaluate(p, q, c, c.matrix(features) @ w) for _g, p, _n, q, c in examples}
        ratio = answers.best_ratio(
            [(p, tops[(p.path, q["id"])]) for g, p, n, q, _c in examples if g != f and n == "dev"]
        )
        for g, p, n, q, _c in examples:
            if g == f:
                row = tops[(p.path, q["id"])]
                if n == "dev" and row["top"] is not None:
                    row |= answers.scores(p, q, row["top"], ratio)
                held.setdefault((p.path, n), []).append(row)
    return held


def per_question(key: str, held: dict[tuple, list]) -> list[str]:
    """One JSON line per held-out question: what the model of ``key`` ranked first and where the gold was."""
    out = []
    for (path, name), rows in sorted(held.items()):
        for r in rows:
            q, top = r["q"], r["top"]
            first = r["p"].key_of.get(top) if top is not None else None
            # A question with law-level gold only (ooc_bwb) has no article to hit: null, as the table leaves
            # it out of article Hit@1.
            row = {
                "model": key, "index": Path(path).name, "set": name, "id": q["id"], "question": q["question"],
                "gold_articles": sorted(q["gold"]), "gold_laws": sorted(q["laws"]),
                "first_article": first[0] if first else None, "first_law": first[1] if first else None,
                "law_hit1": r["law1"], "hit1": r["hit1"] if q["gold"] else None,
                "gold_rank": r["rank"] if q["gold"] else None,
            }  # fmt: skip
            out.append(json.dumps(row, ensure_ascii=False) + "\n")
    return out


def _rows(examples: list[tuple], features: list[str]) -> list[tuple]:
    """The fitting rows of the examples that have a gold article among their candidates, weighted by set."""
    kept = [(p, n, q, c) for _, p, n, q, c in examples if _labels(p, q, c)[0].any()]
    weights = set_weights([f"{p.path}|{n}" for p, n, _, _ in kept])
    return [(c.matrix(features), _labels(p, q, c)[0].astype(float), w) for (p, n, q, c), w in zip(kept, weights)]


def _evaluate(p: Prepared, q: dict, c, scores: np.ndarray) -> dict:
    if not len(c.articles):
        return {"hit1": 0.0, "hit3": 0.0, "rr": 0.0, "law1": 0.0, "gold": bool(q["gold"]), "top": None, "q": q,
                "p": p, "rank": None}  # fmt: skip
    order = np.lexsort((c.articles, -scores))
    is_gold, is_law = _labels(p, q, c)
    ranks = np.flatnonzero(is_gold[order])
    rank = int(ranks[0]) + 1 if len(ranks) else None
    return {
        "hit1": float(rank == 1), "hit3": float(rank is not None and rank <= 3), "rr": 1 / rank if rank else 0.0,
        "law1": float(is_law[order[0]]), "gold": bool(q["gold"]), "top": int(c.articles[order[0]]), "q": q,
        "p": p, "rank": rank,
    }  # fmt: skip


class Answers:
    """The extractive answer from a question's first article, scored against the gold answer (cached)."""

    def __init__(self):
        self._text: dict[tuple, str] = {}

    def text(self, p: Prepared, q: dict, article: int, ratio: float) -> str:
        from wetqa.generation.backends.extractive import ExtractiveBackend
        from wetqa.generation.parser import parse_output
        from wetqa.retrieval import Hit

        key = (p.path, q["id"], article, ratio)
        if key not in self._text:
            a = p.articles
            parts = tuple(a.chunks.rows(range(int(a.first[article]), int(a.first[article] + a.count[article]))))
            paragraphs = a.chunks.paragraphs([int(a.ranked_row[article])])[0]
            hit = Hit(parts[0], 1.0, 1, "articles", parts, paragraphs)
            raw = ExtractiveBackend(paragraph_ratio=ratio).answer(q["question"], [hit])
            self._text[key] = parse_output(raw, [c.doc_id for c in parts]).answer
        return self._text[key]

    def best_ratio(self, rows: list[tuple[Prepared, dict]]) -> float:
        from wetqa.evaluation.rouge import rouge_l

        rows = [(p, r) for p, r in rows if r["top"] is not None]
        if not rows:
            return 1.0
        return max(
            RATIOS,
            key=lambda x: (
                np.mean([rouge_l(self.text(p, r["q"], r["top"], x), r["q"]["answer"]).fmeasure for p, r in rows]),
                x,
            ),
        )

    def scores(self, p: Prepared, q: dict, article: int, ratio: float) -> dict:
        from wetqa.evaluation.meteor import meteor
        from wetqa.evaluation.rouge import rouge_l

        text = self.text(p, q, article, ratio)
        right = float(p.key_of[article][0] in q["gold"])  # one article cited: P = Hit, R = right / gold
        return {
            "rouge": rouge_l(text, q["answer"]).fmeasure, "meteor": meteor(text, q["answer"]),
            "P": right, "R": right / len(q["gold"]), "Hit": right,
        }  # fmt: skip


def report(kind: str, held: dict[tuple, list]) -> None:
    print(f"\n{kind}: cross-validated, first article")
    for (path, name), rows in sorted(held.items()):
        with_gold = [r for r in rows if r["gold"]]
        line = (
            f"  {Path(path).name:14s} {name:13s} n={len(rows):3d}  law Hit@1 {np.mean([r['law1'] for r in rows]):.3f}"
        )
        if with_gold:
            line += "  " + "  ".join(
                f"{m} {np.mean([r[k] for r in with_gold]):.3f}"
                for m, k in (("Hit@1", "hit1"), ("Hit@3", "hit3"), ("MRR", "rr"))
            )
        if name == "dev":
            line += (
                "\n"
                + " " * 33
                + "  ".join(
                    f"{m} {np.mean([r.get(k, 0.0) for r in rows]):.3f}"
                    for m, k in (
                        ("ROUGE-L", "rouge"),
                        ("METEOR", "meteor"),
                        ("citation P", "P"),
                        ("R", "R"),
                        ("Hit", "Hit"),
                    )
                )
            )
        print(line)


if __name__ == "__main__":
    main()
