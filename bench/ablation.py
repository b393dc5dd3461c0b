"""Which hand-written signals still add beside the reader: each left out in turn, cross-validated (issue 42).

    python bench/ablation.py INDEX [INDEX ...] [--dataset FILE ...] [--reader MODEL] [--folds 5] [--smoke]

The hand-written signals are the rules about Dutch legal language the ranking reads
(``wetqa.retrieval.articles.candidates.HAND_SIGNALS``): the everyday-to-legal lexicon, the question frame
words, the announcing clause, the law names, the title cover, the kinds of regulation, the BES rule and the
decree-beside-its-law relations. For each, the pipeline with the reader (its two learned models) is fitted
and cross-validated without it (its features 0, the candidates it brings left out), and once more with the
lexicon held out: fitted with it, but each held-out question ranked without it (the lexicon was written while
the everyday questions were at hand; a question it was written for is not a question it generalises to).
Printed: article and law Hit@1 per index and question set for each variant, and per signal whether leaving
it out costs (it adds: kept) or not (it no longer adds: a candidate for removal).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))


def cells(held: list[dict]) -> dict[str, tuple[float, float, int]]:
    """(article Hit@1 or nan, law Hit@1, n) per index/set."""
    from wetqa.retrieval.fitting.ranking import summary

    return {k: (v.get("hit1", float("nan")), v["law_hit1"], v["n"]) for k, v in summary(held).items()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("index", nargs="*")
    ap.add_argument("--dataset", type=Path, action="append")
    ap.add_argument("--reader", default="google/embeddinggemma-300m", help="none: the pipelines without a reader")
    ap.add_argument("--folds", type=int, default=5)
    ap.add_argument("--signals", help="comma-separated signals to ablate (default: every one)")
    ap.add_argument("--smoke", action="store_true")
    from functools import partial

    import _smoke

    _smoke.main(ap, run, partial(_smoke.over_indexes, run=run, name="ablation"), "index", "give one or more indexes")


def run(args: argparse.Namespace) -> None:
    import numpy as np
    from cross_validate import DATASETS

    from wetqa.retrieval.articles.candidates import HAND_SIGNALS
    from wetqa.retrieval.fitting import ranking as fitting

    reader = None if args.reader == "none" or args.smoke else args.reader
    datasets = args.dataset or [d for d in DATASETS if d.is_file()]
    folds = args.folds
    if args.smoke:
        import _smoke

        datasets, folds = [_smoke.dataset(Path(args.index[0]).parent / "smoke-sets" / "dev.jsonl")], 2
    signals = args.signals.split(",") if args.signals else list(HAND_SIGNALS)
    variants: list[tuple[str, dict]] = [("all signals", {})]
    variants += [(f"without {s}", {"without": frozenset({s})}) for s in signals]
    if "lexicon" in signals:
        variants.append(("lexicon held out", {"tested_without": frozenset({"lexicon"})}))
    results: dict[str, dict] = {}
    for name, options in variants:
        fitted = fitting.fit_ranking(args.index, datasets, folds, reader, progress=False, dense_only=True, **options)
        results[name] = {key: cells(held) for key, held in fitted["held"].items() if ("+reader" in key) == bool(reader)}
        print(f"{name}: done", file=sys.stderr, flush=True)
    keys = sorted({k for r in results.values() for k in r})
    for key in keys:
        columns = sorted({c for r in results.values() for c in r.get(key, {})})
        print(f"\n{key}: cross-validated Hit@1 article / law")
        print("| variant | " + " | ".join(columns) + " | sum of hits |")
        print("|---|" + "---|" * (len(columns) + 1))
        base = None
        for name, _ in variants:
            row = results[name].get(key, {})
            hits = sum(
                (0 if np.isnan(a) else a * n) + l_ * n for a, l_, n in (row.get(c, (np.nan, 0.0, 0)) for c in columns)
            )
            base = hits if base is None else base
            cells_text = " | ".join(
                f"{row[c][0]:.3f} / {row[c][1]:.3f}" if c in row else "" for c in columns
            )  # fmt: skip
            verdict = "" if name == "all signals" else (" (adds)" if hits < base else " (does not add)")
            print(f"| {name} | {cells_text} | {hits:.0f}{verdict} |")


if __name__ == "__main__":
    main()
