"""Retrieval speed on the real corpus.

    python bench/retrieval.py [CORPUS_DIR]

Prints index build time per backend, single-query latency p50/p95, batch
throughput (queries/s, 2 threads) and dense encoding throughput with a tiny
BERT built on the fly (the speed of wetqa's batching code, not of a real model).
Goals: Pyserini index build <= 20 s; batch BM25 >= 500 queries/s.
"""

from __future__ import annotations

import statistics
import sys
import tempfile
import time
from pathlib import Path

_HERE = Path(__file__).resolve().parent
ROOT = _HERE.parent

from wetqa.corpus import BuildOptions, build_corpus, load_chunks  # noqa: E402
from wetqa.evaluation import load_dataset  # noqa: E402
from wetqa.retrieval import build_index, open_index  # noqa: E402

SHARED = ROOT.parent / "shared" / "data"


def latency(retriever, questions, k=10):
    times = []
    for q in questions:
        t = time.perf_counter()
        retriever.search(q, k)
        times.append((time.perf_counter() - t) * 1000)
    times.sort()
    return statistics.median(times), times[int(0.95 * (len(times) - 1))]


def throughput(retriever, questions, k=10, threads=2):
    retriever.batch_search(questions[:8], k, threads)  # warm-up
    t = time.perf_counter()
    retriever.batch_search(questions, k, threads)
    return len(questions) / (time.perf_counter() - t)


def main() -> None:
    questions = [i.question for i in load_dataset(SHARED / "legalqa" / "dev.jsonl")]
    many = questions * 20
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        corpus = Path(sys.argv[1]) if len(sys.argv) > 1 else tmp / "corpus"
        if len(sys.argv) <= 1:
            build_corpus([SHARED / "bwb"], corpus, BuildOptions(), progress=False)
        n = len(load_chunks(corpus))
        print(f"corpus: {n} chunks; {len(questions)} dev questions, {len(many)} for throughput")
        for name in ("bm25s", "bm25"):
            t = time.perf_counter()
            build_index(corpus, name, tmp / name, progress=False)
            build = time.perf_counter() - t
            r = open_index(tmp / name)
            p50, p95 = latency(r, questions)
            qps = throughput(r, many)
            goal = " (goal <= 20 s)" if name == "bm25" else ""
            print(
                f"{name:6} index build {build:6.2f} s{goal}; latency p50 {p50:.1f} ms p95 {p95:.1f} ms; "
                f"batch {qps:,.0f} queries/s with 2 threads (goal >= 500)"
            )

        sys.path.insert(0, str(ROOT / "tests"))
        from tiny_models import tiny_sentence_transformer

        model = tiny_sentence_transformer(tmp / "tiny")
        t = time.perf_counter()
        build_index(corpus, "dense", tmp / "dense", {"model": str(model), "batch_size": 64}, progress=False)
        build = time.perf_counter() - t
        r = open_index(tmp / "dense")
        p50, p95 = latency(r, questions)
        print(
            f"dense  (tiny 2-layer BERT, CPU) index build {build:6.2f} s = {n / build:,.0f} passages/s encoded; "
            f"latency p50 {p50:.1f} ms p95 {p95:.1f} ms; batch {throughput(r, many):,.0f} queries/s"
        )


if __name__ == "__main__":
    main()
