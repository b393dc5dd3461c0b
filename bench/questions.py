"""The questions each article answers (issue 52): what the shipped question set holds and what reading it does
to the ranking, the abstention and the cost, in one run.

    python bench/questions.py [--index data/index] [--whole INDEX] [--reader MODEL] [--folds 5] [--cost-only]
                              [--quality-only] [--smoke]

Printed:
- **the set**: questions, articles and laws of the shipped question set (``retrieval/questions.jsonl.gz``),
  the articles left out by reason, how many of the index's articles it covers, and how it was written
  (``bench/data/questions_round.json``: writers, batches, hours);
- **ranking, cross-validated** (``wetqa fit ranking``, 5 folds over every question set of ``bench/data`` that
  has gold, the real questions ``real.jsonl`` among them): article and law Hit@1 per index and set, with the
  questions view and without it (the same folds, the same code);
- **held out**: the shipped models on ``everyday_holdout.jsonl`` and on the real questions, with the questions
  view and ``--no-questions`` (``wetqa eval retrieval``);
- **abstention, cross-validated** (``wetqa fit confidence``): the share abstained per set (everyday <= 10% while
  out-of-corpus >= 80% is the goal);
- **cost**: a server with an empty vector cache asked 20 everyday questions (p50 / p95, goal p50 <= 2 s), a
  cold ``wetqa ask`` (goal <= 4 s, <= 1.5 GB).
``--smoke``: a tiny index with a question set written here, seconds.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))
sys.path.insert(0, str(ROOT))
DATA = ROOT / "bench" / "data"
SHARED = ROOT.parent / "shared" / "data"
# Every question set with gold the ranking is fitted and measured on (a set is used on an index holding its laws).
SETS = [SHARED / "legalqa" / "dev.jsonl", *(DATA / f"{n}.jsonl" for n in ("everyday", "real", "everyday_bwb", "bes",
                                                                          "out_of_corpus"))]  # fmt: skip
HELD_OUT = [DATA / "everyday_holdout.jsonl"]


def the_set(index: str | None) -> None:
    from wetqa.retrieval.questions import shipped, shipped_path

    qset = shipped()
    if qset is None:
        print("no question set shipped")
        return
    with_q = [r for r in qset.rows if r.questions]
    skips = Counter(r.skip for r in qset.rows if r.skip)
    print(f"question set {shipped_path().name} ({qset.digest[:16]}): {len(qset):,} questions for {len(with_q):,} articles "
          f"of {len({r.law_id for r in with_q})} laws ({len(qset) / max(len(with_q), 1):.2f} a article); "
          f"{sum(skips.values()):,} articles without: " + ", ".join(f"{k} {v}" for k, v in skips.most_common()))  # fmt: skip
    if index:
        from wetqa.retrieval.engines.index import read_index_meta

        meta = read_index_meta(index).get("questions") or {}
        print(f"  {Path(index).name}: {meta.get('questions', 0):,} questions read beside {meta.get('articles', 0):,} of "
              f"its articles ({meta.get('articles_by_label', 0)} by label only: another version's text)")  # fmt: skip
    round_file = DATA / "questions_round.json"
    if round_file.is_file():
        r = json.loads(round_file.read_text(encoding="utf-8"))
        print(f"  written by {r['writers']} writers in {r['batches']} batches, {r['hours']} hours ({r['note']})")


def quality(indexes: list[str], reader: str, folds: int) -> None:
    from wetqa.retrieval.fitting import ranking as fitting

    sets = [s for s in SETS if s.is_file()]
    for questions in (True, False):
        fitted = fitting.fit_ranking(indexes, sets, folds, reader, progress=False, dense_only=True, questions=questions)
        for key, held in fitted["held"].items():
            if "+reader" in key or reader == "none":
                print("\n" + fitting.report(key, held))


def abstention(indexes: list[str], reader: str, folds: int) -> None:
    from wetqa.retrieval.fitting import ranking as fitting
    from wetqa.retrieval.ranking.confidence import FEATURES

    sets = [s for s in SETS if s.is_file()] + [DATA / "post_2012.jsonl"]
    signals = fitting.collect_signals(indexes, sets, reader, progress=False)
    for key, rows in signals.items():
        if "+dense" not in key or (reader != "none" and "+reader" not in key):
            continue
        budget = 0.05 if key.endswith("@whole") else 0.10
        _, cv = fitting.fit_confidence(rows, FEATURES, folds, budget)
        print(f"\n{key}: abstention, cross-validated (budget {budget:.2f}), AUC {cv['auc']:.3f}")
        for where, cell in cv["abstained"].items():
            print(f"  {where:50s} n={cell['n']:3d}  abstained {cell['abstained']:.1%}")


def held_out(indexes: list[str], reader: str) -> None:
    print("\nheld out (never fitted on), the shipped models, with the questions view and without:")
    sets = [s for s in HELD_OUT if s.is_file()]
    with tempfile.TemporaryDirectory(prefix="wetqa-questions-held-") as out:
        n = 0
        for index in indexes:
            for dataset in sets:
                for flag in ("--questions", "--no-questions"):
                    n += 1
                    done = subprocess.run(
                        [sys.executable, "-m", "wetqa", "eval", "retrieval", "--index", index, "--dataset", str(dataset),
                         "--reader", reader, flag, "--output", "json", "--out", str(Path(out) / str(n))],
                        capture_output=True, text=True,
                    )  # fmt: skip
                    if done.returncode:
                        print(f"  {Path(index).name} {dataset.name} {flag}: {done.stderr.strip()[-200:]}")
                        continue
                    result = json.loads(done.stdout)
                    a, law = result["article"], result.get("law") or {}
                    print(f"  {Path(index).name:14s} {dataset.stem:18s} {flag:15s} n={result['n_questions']:3d}  Hit@1 "
                          f"{a['Hit@1']:.3f}  Hit@3 {a['Hit@3']:.3f}  MRR {a['MRR']:.3f}"
                          + (f"  law Hit@1 {law['Hit@1']:.3f}" if "Hit@1" in law else ""))  # fmt: skip


def cost(index: str, reader: str) -> None:
    from reader import serving

    everyday = [json.loads(x)["question"] for x in (DATA / "everyday.jsonl").read_text(encoding="utf-8").splitlines()]
    figures = serving(index, reader, everyday[-20:])
    print(f"\ncost: serving, candidates never read: p50 {figures['p50_s']:.2f} s, p95 {figures['p95_s']:.2f} s over "
          f"{figures['questions']} questions (goal p50 <= 2 s); cold ask {figures['cold_ask_s']:.2f} s, peak "
          f"{figures['cold_ask_peak_mb']} MB (goal <= 4 s, <= 1.5 GB)")  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--index", default=str(ROOT / "data" / "index"))
    ap.add_argument("--whole", help="an index of the whole BWB (its rows too)")
    ap.add_argument("--reader", default="google/embeddinggemma-300m")
    ap.add_argument("--folds", type=int, default=5)
    ap.add_argument("--cost-only", action="store_true")
    ap.add_argument("--quality-only", action="store_true")
    ap.add_argument("--smoke", action="store_true", help="a tiny index and question set built here: seconds")
    args = ap.parse_args()
    if args.smoke:
        return smoke()
    from wetqa.retrieval.articles.reader import resolve_reader

    reader = resolve_reader(args.reader) if args.reader != "none" else "none"
    indexes = [args.index, *([args.whole] if args.whole else [])]
    the_set(args.index)
    if not args.cost_only:
        quality(indexes, reader, args.folds)
        held_out(indexes, reader)
        abstention(indexes, reader, args.folds)
    if not args.quality_only:
        cost(args.index, reader)


def smoke() -> None:
    """A tiny index over the test fixtures with a few questions written for its articles: the set's figures and
    the questions view's candidates, in seconds (what tests/test_bench.py runs)."""
    import _smoke

    from wetqa.retrieval import build_index
    from wetqa.retrieval.articles.questions_view import QuestionsView
    from wetqa.retrieval.engines.index import load_index
    from wetqa.retrieval.questions import ArticleQuestions, QuestionSet, text_hash

    _smoke.announce("a tiny index with written questions")
    with tempfile.TemporaryDirectory(prefix="wetqa-questions-smoke-") as tmp:
        work = Path(tmp)
        corpus = _smoke.corpus(work)
        recs = [json.loads(x) for x in (corpus / "articles.jsonl").read_text(encoding="utf-8").splitlines()]
        live = [r for r in recs if not r["expired"] and r["text"].strip()][:5]
        rows = [ArticleQuestions(r["law_id"], r["article"], r["version_date"], text_hash(r["text"]),
                                 (f"Wat regelt de wet over {r['article'].lower()} voor mij?",), writer="smoke")
                for r in live]  # fmt: skip
        path = QuestionSet(rows).write(work / "set.jsonl.gz")
        meta = build_index(corpus, "articles", work / "index", progress=False, questions=str(path))
        view = QuestionsView.load(work / "index", load_index(work / "index"))
        assert view is not None
        best, _ = view.by_article(view.bm25(rows[0].questions[0]))
        print(json.dumps({"questions": meta["questions"], "first_candidate": int(view.top_articles(best, 3)[0])}))


if __name__ == "__main__":
    main()
