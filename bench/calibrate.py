"""The confidence and its abstention threshold, cross-validated (``wetqa fit confidence``), per index and set.

    python bench/calibrate.py INDEX [INDEX ...] [--dataset FILE ...] [--reader MODEL|none] [--folds 5]
                              [--budget 0.10] [--budget-whole 0.05] [--sweep] [--write] [--smoke]
    python bench/calibrate.py --smoke    (a tiny index built here: seconds, what tests/test_bench.py runs)

Every question goes through each pipeline of each index (with the dense signals and without; with the reader
when one is given), and a logistic regression over the confidence signals tells the questions the index
answers (it holds their gold laws) from the others: the package's :mod:`wetqa.retrieval.fitting.ranking`.
Answerable: the benchmark's dev questions and the everyday questions whose laws an index holds (on the
whole BWB also the everyday, BES and out-of-corpus questions about its other laws); not answerable: the
out-of-corpus questions the index lacks, the questions about laws enacted after 2012 and, on the 272 laws,
the everyday and BES questions about other laws. Printed per index and set: the share abstained of held-out
questions; ``--sweep`` at several budgets; ``--write`` merges the models into retrieval/ranking/confidence.json.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "bench" / "data"
DEV = ROOT.parent / "shared" / "data" / "legalqa" / "dev.jsonl"
DATASETS = [
    DEV,
    *(DATA / f"{name}.jsonl" for name in ("everyday", "everyday_bwb", "bes", "out_of_corpus", "post_2012")),
]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("index", nargs="*", help="one or more indexes (none with --smoke: a tiny one built here)")
    ap.add_argument("--dataset", type=Path, action="append", help="a question set (default: the sets above)")
    ap.add_argument("--reader", default="google/embeddinggemma-300m", help="the reader (none: the pipelines without)")
    ap.add_argument("--folds", type=int, default=5)
    # On part of the BWB an answered question about a law it lacks cites the wrong law: the threshold may
    # refuse up to a fifth of the answerable (mostly everyday questions it ranks wrong) to refuse most of
    # those. On the whole BWB nearly every question is answerable: refusing is only a loss there.
    ap.add_argument("--budget", type=float, default=0.10, help="on part of the BWB")
    ap.add_argument("--budget-whole", type=float, default=0.05, help="on an index of the whole BWB")
    ap.add_argument("--write", action="store_true")
    ap.add_argument("--sweep", action="store_true", help="print the abstention per set at several budgets")
    ap.add_argument(
        "--smoke",
        action="store_true",
        help="a few questions per set (of a tiny index built here when none is given): seconds, for the test suite",
    )
    from functools import partial

    import _smoke

    _smoke.main(ap, run, partial(_smoke.over_indexes, run=run, name="calibrate"), "index", "give one or more indexes")


def run(args: argparse.Namespace) -> None:
    from wetqa.retrieval.fitting import ranking as fitting
    from wetqa.retrieval.ranking.confidence import FEATURES

    datasets = args.dataset or [d for d in DATASETS if d.is_file()]
    reader = None if args.reader == "none" or args.smoke else args.reader
    if args.smoke:
        import _smoke

        work = Path(args.index[0]).parent
        dev = _smoke.dataset(work / "smoke-sets" / "dev.jsonl")
        ooc = work / "smoke-sets" / "out_of_corpus.jsonl"
        import json

        ooc.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in _smoke.out_of_corpus()))
        datasets, args.folds = [dev, ooc], 2
    data = fitting.collect_signals(args.index, datasets, reader, progress=sys.stderr.isatty())
    out = {}
    for budget in (0.03, 0.05, 0.10, 0.15, 0.20) if args.sweep else (None,):
        if budget is not None:
            print(f"\n=== budget {budget}")
        for key, rows in data.items():
            b = budget if budget is not None else args.budget_whole if key.endswith("@whole") else args.budget
            spec, cv = fitting.fit_confidence(rows, FEATURES, args.folds, b)
            out[key] = spec | {"provenance": {"datasets": fitting.datasets_digest(datasets), "reader": reader}}
            print(f"\n{key}: {len(spec['features'])} signals; {args.folds}-fold CV AUC {cv['auc']:.3f}")
            print(
                "  coefficients (standardised): "
                + ", ".join(f"{f} {c:+.2f}" for f, c in zip(spec["features"], spec["coef"]))
            )
            for where, cell in cv["abstained"].items():
                print(f"  {where:50s} n={cell['n']:3d}  abstained {cell['abstained']:.1%}")
    if args.write and not args.smoke and not args.sweep:
        print(f"\nwrote {fitting.write_models(fitting.shipped_path('confidence'), out, 'confidence')}")


if __name__ == "__main__":
    main()
