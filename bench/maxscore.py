"""The pruned article ranking (MaxScore, retrieval/maxscore.py) against reading every posting.

    python bench/maxscore.py INDEX [INDEX ...] [--k 30] [--repeat 5]

For each articles index (built by this wetqa, so with term and block maxima) and each of the 51 dev
and 82 out-of-corpus questions: the first stage's top k both ways (checked identical, bit for bit),
each timed as the best of ``--repeat`` runs (warm: what a server sees once the pages are cached).
Printed per index: the questions' postings, p50 / p90 milliseconds of each way and their ratio, and
the same by the number of postings a question's terms hold (pruning pays from an index size:
``articles.PRUNE_FROM``).
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import numpy as np

from wetqa.corpus.dataset import load_dataset
from wetqa.retrieval import open_index

ROOT = Path(__file__).resolve().parent.parent
DEV = ROOT.parent / "shared" / "data" / "legalqa" / "dev.jsonl"
OOC = ROOT / "bench" / "data" / "out_of_corpus.jsonl"
BINS = (0, 10_000, 50_000, 200_000, 1_000_000, 10**12)


def best_of(fn, repeat: int) -> tuple[float, object]:
    out, best = None, float("inf")
    for _ in range(repeat):
        t = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - t)
    return best * 1000, out


def same(a, b) -> bool:
    return (
        np.array_equal(a[0], b[0])
        and np.array_equal(a[1], b[1])
        and all(np.array_equal(a[2][v], b[2][v]) for v in a[2])
    )


def pct(values: list[float], q: float) -> float:
    return sorted(values)[min(len(values) - 1, int(q * len(values)))]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("indexes", nargs="*", help="articles indexes (none with --smoke)")
    ap.add_argument("--k", type=int, default=30)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--smoke", action="store_true", help="a few questions over a tiny index built here (seconds)")
    import _smoke

    _smoke.main(ap, run, smoke, "indexes", "give one or more articles indexes")


def run(args: argparse.Namespace) -> None:
    questions = [item.question for item in load_dataset(DEV)]
    questions += [json.loads(line)["question"] for line in OOC.read_text(encoding="utf-8").splitlines() if line]
    compare(args, questions)


def smoke(args: argparse.Namespace) -> None:
    import tempfile

    import _smoke

    _smoke.announce()
    with tempfile.TemporaryDirectory() as tmp:
        args.indexes, args.repeat = [str(_smoke.index(Path(tmp)))], 1
        compare(args, [q["question"] for q in _smoke.questions() + _smoke.out_of_corpus()])


def compare(args: argparse.Namespace, questions: list[str]) -> None:
    for path in args.indexes:
        articles = open_index(path, rescore=False)
        if articles.pruned is None:
            raise SystemExit(f"{path}: no term and block maxima (built by an older wetqa, or numba missing)")
        t = time.perf_counter()
        articles.pruned.warm()
        warm_s = time.perf_counter() - t
        rows = []
        for q in questions:
            terms = articles.term_ids(q)
            all_ms, full = best_of(lambda: articles._top_all(terms, args.k), args.repeat)  # noqa: B023
            pruned_ms, pruned = best_of(lambda: articles._top_pruned(terms, args.k), args.repeat)  # noqa: B023
            if not same(full, pruned):
                raise SystemExit(f"{path}: the rankings differ for {q!r}")
            rows.append((articles.postings_read(terms), all_ms, pruned_ms))
        print(f"\n{path}: {articles.n_articles:,} articles, {len(rows)} questions, top {args.k} identical both ways")
        print(f"kernels ready in {warm_s:.1f} s (compiled, or loaded from numba's cache)")
        postings = [r[0] for r in rows]
        a, p = [r[1] for r in rows], [r[2] for r in rows]
        print(f"postings per question: p50 {statistics.median(postings):,.0f}, max {max(postings):,}")
        print("| postings | questions | every posting p50 / p90 ms | pruned p50 / p90 ms | ratio p50 |")
        print("|---|---|---|---|---|")
        for lo, hi in zip(BINS, BINS[1:]):
            sel = [r for r in rows if lo <= r[0] < hi]
            if not sel:
                continue
            sa, sp = [r[1] for r in sel], [r[2] for r in sel]
            print(
                f"| {lo:,}-{hi:,} | {len(sel)} | {statistics.median(sa):.2f} / {pct(sa, 0.9):.2f} | "
                f"{statistics.median(sp):.2f} / {pct(sp, 0.9):.2f} | {statistics.median(sa) / statistics.median(sp):.1f}x |"
            )
        print(
            f"| all | {len(rows)} | {statistics.median(a):.2f} / {pct(a, 0.9):.2f} | "
            f"{statistics.median(p):.2f} / {pct(p, 0.9):.2f} | {statistics.median(a) / statistics.median(p):.1f}x |"
        )


if __name__ == "__main__":
    main()
