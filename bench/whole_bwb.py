"""All of Dutch law (issue 27): the 272 laws and the whole BWB of October 2012, side by side, in one run.

    python bench/whole_bwb.py [--out DIR] [--rescore MODEL] [--smoke]

The whole-BWB corpus is ../shared/data/bwb (272 current laws) plus the 2012 files whose id is not
among them (unpacked outside the repository, bench/_bwb2012.py): 18,059 files. Built and indexed in
child processes (their wall time and peak memory measured), kept when up to date. Printed:
- build and index seconds, peak MB, disk MB; parse failures; laws without a chunk;
- cold `wetqa ask` (a new process: seconds and peak MB) and warm p50/p95 of `POST /v1/search` on a
  real `wetqa serve`, on the 272-law index and the whole BWB (ratio);
- dev article Hit@1, Hit@3, MRR (the shipped ranking; cross-validated figures: bench/cross_validate.py
  over both indexes) and law-level Hit@1 of the everyday, BES and out-of-corpus questions whose law the
  whole BWB holds; BES regulations first for a question that does not name BES;
- abstention (the shipped calibration for each index): answerable questions abstained, questions about
  laws enacted after 2012 (post_2012.jsonl) abstained.
--rescore MODEL: both indexes with dense re-scoring (without --precompute: passages are encoded as
questions need them, so BM25 chooses the candidates); --precompute-kinds KINDS with it: both keep the
passage vectors of those kinds (a dense first stage over them). --smoke: 20 laws and the test fixtures' 2012-style
files, without the archive (seconds).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _bwb2012 import CURRENT, FIXTURES_2012, VALID_ON, law_id, linked_sources, unpacked  # noqa: E402
from fairness import start_server  # noqa: E402
from scale import WETQA, build_corpus, du, free_port  # noqa: E402
from scale import run as timed  # noqa: E402  (seconds, peak MB, stdout) of a command run to its end

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "bench" / "data"
BES_WORDS = re.compile(r"\b(bes|bonaire|sint eustatius|saba|caribisch nederland|caribische)\b", re.IGNORECASE)


def prepare(out: Path, name: str, files: list[Path], rescore: str | None, kinds: str | None = None) -> dict:
    src = linked_sources(out / f"src-{name}", files)
    corpus, index = out / f"corpus-{name}", out / f"index-{name}"
    b_s, b_mb, built = build_corpus(src, corpus, "--valid-on", VALID_ON)
    # --force: the bench's own index, built afresh each run so that its time is a build's.
    argv = ["index", "--corpus", str(corpus), "--out", str(index), "--force", "--no-progress", "--output", "json"]
    if rescore:
        argv += ["--rescore", rescore]
        held = set(json.loads((corpus / "manifest.json").read_text(encoding="utf-8"))["holds"]["kinds"])
        kept = [k for k in (kinds or "").split(",") if k in held]  # the 272 laws hold no rijkswet
        argv += ["--precompute", "--precompute-kinds", ",".join(kept)] if kept else []
    i_s, i_mb, _ = timed([*WETQA, *argv])
    return {
        "name": name,
        "files": len(files),
        "laws": built.get("laws"),
        "chunks": built.get("chunks"),
        "failures": len(built.get("failures", [])),
        "build_s": b_s,
        "build_mb": b_mb,
        "index_s": i_s,
        "index_mb": i_mb,
        "disk_mb": du(index),
        "index": index,
    }


def all_sets() -> dict[str, list[dict]]:
    """Every question set of bench/cross_validate.py (read as `wetqa fit` reads them)."""
    from cross_validate import DATASETS

    from wetqa.retrieval.fitting.ranking import load_sets

    sets = load_sets([d for d in DATASETS if d.is_file()])
    return {
        name: [{"id": q.id, "question": q.question, "gold": set(q.gold), "laws": set(q.laws)} for q in qs]
        for name, qs in sets.items()
    }


def question_sets(held: set[str]) -> dict[str, list[dict]]:
    sets = {n: [q for q in qs if q["laws"] <= held] for n, qs in all_sets().items()}
    post = [json.loads(x) for x in (DATA / "post_2012.jsonl").read_text(encoding="utf-8").splitlines() if x.strip()]
    sets["post_2012"] = [{"id": r["id"], "question": r["question"], "gold": set(), "laws": set()} for r in post]
    return {n: qs for n, qs in sets.items() if qs}


def ranked(retriever, question: str) -> tuple[list[str], list[str], list]:
    from wetqa.corpus.dataset import article_key

    hits = retriever.search(question, 10)
    articles = list(dict.fromkeys(article_key(h.chunk.law_id, h.chunk.article) for h in hits))
    return articles, [h.chunk.law_id for h in hits], hits


def quality(index: Path, smoke: bool) -> dict:
    from wetqa.generation import Pipeline
    from wetqa.generation.backends.extractive import ExtractiveBackend
    from wetqa.retrieval import open_index
    from wetqa.retrieval.scope import law_table_of

    retriever = open_index(index)
    table = law_table_of(retriever)
    held = set(table.ids)
    bes_laws = {r["law_id"] for r in table.records if r.get("jurisdiction") == "bes"}
    pipeline = Pipeline(retriever, ExtractiveBackend(), k=3)  # the shipped calibration decides abstention
    out: dict = {}
    for name, qs in question_sets(held).items():
        qs = qs[:6] if smoke else qs
        hit1 = hit3 = rr = law1 = bes_first = abstained = 0
        for q in qs:
            articles, laws, hits = ranked(retriever, q["question"])
            rank = next((n for n, a in enumerate(articles, 1) if a in q["gold"]), None)
            hit1 += rank == 1
            hit3 += rank is not None and rank <= 3
            rr += 1 / rank if rank else 0
            law1 += bool(laws) and laws[0] in q["laws"]
            bes_first += bool(laws) and laws[0] in bes_laws and not BES_WORDS.search(q["question"])
            abstained += pipeline.ask(q["question"]).abstained
        n = len(qs)
        out[name] = {"n": n, "Hit@1": hit1 / n, "Hit@3": hit3 / n, "MRR": rr / n, "law Hit@1": law1 / n,
                     "BES first, not asked": bes_first, "abstained": abstained / n}  # fmt: skip
    return out


def serve_latency(index: Path, questions: list[str], seconds: float, extra: dict | None = None) -> dict:
    """p50 / p95 ms of POST /v1/search (k 10, with ``extra`` fields in each body) on a real `wetqa serve`,
    4 clients for ``seconds`` after every question was asked once."""
    import httpx

    from wetqa.home import cache_root

    port = free_port()
    proc = start_server(str(index), port, os.environ.get("WETQA_CACHE") or str(cache_root()))
    url = f"http://127.0.0.1:{port}"
    try:
        for q in questions:  # warm: kernels compiled, pages read, passages encoded
            httpx.post(url + "/v1/search", json={"query": q, "k": 10, **(extra or {})}, timeout=600)
        latencies = []

        async def client(q: str, until: float) -> None:
            async with httpx.AsyncClient(timeout=600) as c:
                while time.perf_counter() < until:
                    t0 = time.perf_counter()
                    r = await c.post(url + "/v1/search", json={"query": q, "k": 10, **(extra or {})})
                    r.raise_for_status()
                    latencies.append(time.perf_counter() - t0)

        async def run() -> None:
            until = time.perf_counter() + seconds
            await asyncio.gather(*(client(q, until) for q in questions[:4]))

        asyncio.run(run())
        latencies.sort()
        p95 = latencies[int(0.95 * (len(latencies) - 1))]
        return {"n": len(latencies), "p50": 1000 * statistics.median(latencies), "p95": 1000 * p95}
    finally:
        proc.terminate()
        proc.wait(30)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, default=Path.home() / ".cache" / "wetqa-bench" / "whole")
    ap.add_argument("--rescore", help="a re-scoring model for both indexes (default: BM25 ranking only)")
    ap.add_argument(
        "--precompute-kinds",
        metavar="KINDS",
        help="with --rescore: both indexes keep the passage vectors of these kinds (wet,rijkswet: the formal laws; "
        "encoded through the vector cache, so a second run encodes nothing)",
    )
    ap.add_argument("--smoke", action="store_true", help="20 of the laws and the test fixtures' 2012 files (seconds)")
    ap.add_argument("--seconds", type=float, default=10.0, help="how long the serve latency runs, per index")
    args = ap.parse_args()
    if args.precompute_kinds and not args.rescore:
        ap.error("--precompute-kinds applies with --rescore MODEL")
    if args.smoke:
        import tempfile

        print("smoke run: tiny sizes, figures not meaningful")
        with tempfile.TemporaryDirectory() as tmp:  # its own folder, gone after
            run(args, Path(tmp))
    else:
        run(args, args.out / "full")


def run(args: argparse.Namespace, out: Path) -> None:
    current = sorted(CURRENT.glob("*.xml"))
    ids = {law_id(f) for f in current}
    if args.smoke:  # the test fixtures' 2012-style files: no archive to unpack in a smoke run
        current, old = current[:20], sorted(FIXTURES_2012.glob("*.xml"))
    else:
        old = [f for f in sorted(unpacked().glob("*.xml")) if law_id(f) not in ids]
    kinds = args.precompute_kinds if args.rescore else None
    rows = [
        prepare(out, "272", current, args.rescore, kinds),
        prepare(out, "whole", current + old, args.rescore, kinds),
    ]
    print("\n| | 272 laws | whole BWB | ratio |\n|---|---|---|---|")
    a, b = rows

    def line(label: str, key: str, fmt: str = "{:.1f}") -> None:
        ratio = b[key] / a[key] if a[key] else float("nan")
        print(f"| {label} | {fmt.format(a[key])} | {fmt.format(b[key])} | {ratio:.2f}x |")

    line("files", "files", "{:,}")
    line("laws built", "laws", "{:,}")
    line("chunks", "chunks", "{:,}")
    print(f"| parse failures | {a['failures']} | {b['failures']} | |")
    line("corpus build s (wall)", "build_s")
    line("corpus build peak MB", "build_mb", "{:.0f}")
    line("index s (wall)", "index_s")
    line("index peak MB", "index_mb", "{:.0f}")
    line("index on disk MB", "disk_mb", "{:.0f}")
    question = "Wanneer kan de rechter het gezag van een ouder beëindigen?"
    for r in rows:
        cold = [
            timed([*WETQA, "ask", question, "--index", str(r["index"]), "--generator", "extractive"])
            for _ in range(1 if args.smoke else 3)
        ]
        r["cold_s"], r["cold_mb"] = statistics.median(c[0] for c in cold), max(c[1] for c in cold)
    line("cold `ask` s (new process, median)", "cold_s", "{:.2f}")
    line("cold `ask` peak MB", "cold_mb", "{:.0f}")
    dev = [q["question"] for q in all_sets()["dev"]][:8]
    for r in rows:
        r |= {f"serve_{k}": v for k, v in serve_latency(r["index"], dev, 2.0 if args.smoke else args.seconds).items()}
    line("warm serve p50 ms (4 clients, /v1/search k 10)", "serve_p50")
    line("warm serve p95 ms", "serve_p95")
    figures = [quality(r["index"], args.smoke) for r in rows]
    print("\n| index | questions | n | Hit@1 | Hit@3 | MRR | law Hit@1 | BES first (not asked) | abstained |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r, f in zip(rows, figures):
        for name, v in f.items():
            print(f"| {r['name']} | {name} | {v['n']} | {v['Hit@1']:.3f} | {v['Hit@3']:.3f} | {v['MRR']:.3f} | "
                  f"{v['law Hit@1']:.3f} | {v['BES first, not asked']} | {v['abstained']:.3f} |")  # fmt: skip
    print(
        "\n(answerable sets: dev, everyday, everyday_bwb, bes, out_of_corpus where the index holds the law; post_2012 "
        "is not)"
    )


if __name__ == "__main__":
    main()
