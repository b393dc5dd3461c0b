"""Cross-validated ranking and answers (``wetqa fit ranking``, plus the extractive answers of the held-out dev
questions): the benchmark's dev questions and the everyday questions, on the 272 laws and on the whole BWB.

    python bench/cross_validate.py INDEX [INDEX ...] [--dataset FILE ...] [--reader MODEL|none] [--folds 5]
                                   [--write] [--per-question FILE] [--smoke]
    python bench/cross_validate.py --smoke    (a tiny index built here: seconds, what tests/test_bench.py runs)

The fitting, the folds and the held-out ranking are the package's (:mod:`wetqa.retrieval.fitting.ranking`);
this bench adds what a ranking does to the answers: for each held-out dev question, the extractive answer
from its first article (the paragraph ratio chosen by ROUGE-L on the other folds' dev questions), scored
against the gold answer (ROUGE-L, METEOR, citation P / R / Hit: the published table's row). ``--write``
merges the models fitted on all questions into the shipped ``retrieval/ranking/ranking.json``.

Datasets (``--dataset``, repeated; the default is every set below that exists): the benchmark's dev questions
``../shared/data/legalqa/dev.jsonl``; ``bench/data/everyday.jsonl`` (gold in the 272 laws),
``everyday_bwb.jsonl`` and ``bes.jsonl`` (gold only in the whole BWB), ``out_of_corpus.jsonl`` (law-level gold:
used where the index holds the law). A set is used on an index that holds its gold laws.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "bench" / "data"
DEV = ROOT.parent / "shared" / "data" / "legalqa" / "dev.jsonl"
DATASETS = [DEV, *(DATA / f"{name}.jsonl" for name in ("everyday", "everyday_bwb", "bes", "out_of_corpus"))]
RATIOS = [0.7, 0.9, 1.0]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("index", nargs="*", help="one or more indexes (none with --smoke: a tiny one built here)")
    ap.add_argument("--dataset", type=Path, action="append", help="a question set (default: the sets above)")
    ap.add_argument("--reader", default="google/embeddinggemma-300m", help="the reader (none: the pipelines without)")
    ap.add_argument("--read-depth", type=int, default=20, help="candidates the reader reads (default 20)")
    ap.add_argument("--folds", type=int, default=5)
    ap.add_argument("--write", action="store_true", help="merge the models fitted on all questions into ranking.json")
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
    from wetqa.io import atomic_file
    from wetqa.retrieval.fitting import ranking as fitting

    if args.per_question and not args.per_question.resolve().parent.is_dir():
        # Checked before the run, not after it: a run of minutes is not lost to a mistyped folder.
        sys.exit(f"cross_validate.py: error: --per-question: no folder {args.per_question.resolve().parent}")
    datasets = args.dataset or [d for d in DATASETS if d.is_file()]
    if args.smoke:
        datasets, folds, reader = [_smoke_dataset(Path(args.index[0]).parent)], 2, None
    else:
        folds, reader = args.folds, None if args.reader == "none" else args.reader
    fitted = fitting.fit_ranking(args.index, datasets, folds, reader, args.read_depth, progress=sys.stderr.isatty())
    answers = Answers()
    lines: list[str] = []
    for key, held in fitted["held"].items():
        print("\n" + fitting.report(key, held))
        dev = [r for r in held if r["q"].set == "dev" and r["top"] is not None]
        if dev:
            print("  dev answers (extractive, held out): " + answers.row(dev, fitted["folds"], folds))
        lines += [json.dumps(r, ensure_ascii=False) + "\n" for r in fitting.per_question(key, held)]
    if args.per_question:
        with atomic_file(args.per_question) as fh:  # whole at the end: an interrupted run leaves the old file
            fh.write("".join(lines))
        print(f"wrote {len(lines)} question results to {args.per_question}")
    if args.write and not args.smoke:
        print(f"wrote {fitting.write_models(fitting.shipped_path('ranking'), fitted['models'], 'ranking')}")


def _smoke_dataset(work: Path) -> Path:
    """The first dev questions (their laws are the smoke index's) as a dataset file."""
    import _smoke

    return _smoke.dataset(work / "smoke-dev" / "dev.jsonl")


class Answers:
    """The extractive answer from a held-out question's first article, scored against the gold answer."""

    def __init__(self):
        self._text: dict[tuple, str] = {}
        self._gold = {}
        from wetqa.corpus.dataset import load_dataset

        if DEV.is_file():
            self._gold = {f"dev-{i.id}": i.answer for i in load_dataset(DEV)}

    def text(self, r: dict, ratio: float) -> str:
        from wetqa.generation.backends.extractive import ExtractiveBackend
        from wetqa.generation.parser import parse_output
        from wetqa.retrieval import Hit

        key = (str(r["prep"].path), r["q"].id, r["top"], ratio)
        if key not in self._text:
            a, x = r["prep"].index, r["top"]
            parts = tuple(a.chunks.rows(range(int(a.first[x]), int(a.first[x] + a.count[x]))))
            paragraphs = a.chunks.paragraphs([int(a.ranked_row[x])])[0]
            hit = Hit(parts[0], 1.0, 1, "articles", parts, paragraphs)
            raw = ExtractiveBackend(paragraph_ratio=ratio).answer(r["q"].question, [hit])
            self._text[key] = parse_output(raw, [c.doc_id for c in parts]).answer
        return self._text[key]

    def scores(self, r: dict, ratio: float) -> dict:
        from wetqa.evaluation.meteor import meteor
        from wetqa.evaluation.rouge import rouge_l

        text, gold = self.text(r, ratio), self._gold.get(r["q"].id, "")
        right = float(r["hit1"])  # one article cited: P = Hit, R = right / gold
        return {"rouge": rouge_l(text, gold).fmeasure, "meteor": meteor(text, gold), "P": right,
                "R": right / max(1, len(r["q"].gold)), "Hit": right}  # fmt: skip

    def row(self, rows: list[dict], fold: dict[str, int], folds: int) -> str:
        """Each row's answer with the paragraph ratio the other folds' dev questions chose (ROUGE-L): the folds
        the ranking was cross-validated with."""
        from wetqa.evaluation.rouge import rouge_l

        out = []
        for f in range(folds):
            train = [r for r in rows if fold[r["q"].id] != f]
            ratio = max(
                RATIOS,
                key=lambda x: (
                    np.mean([rouge_l(self.text(r, x), self._gold.get(r["q"].id, "")).fmeasure for r in train] or [0]),
                    x,
                ),
            )
            out += [self.scores(r, ratio) for r in rows if fold[r["q"].id] == f]
        mean = {k: float(np.mean([s[k] for s in out])) for k in ("rouge", "meteor", "P", "R", "Hit")}
        return (
            f"ROUGE-L {mean['rouge']:.3f}  METEOR {mean['meteor']:.3f}  "
            f"citation P {mean['P']:.3f}  R {mean['R']:.3f}  Hit {mean['Hit']:.3f}"
        )


if __name__ == "__main__":
    main()
