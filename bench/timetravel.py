"""The law as it stood on a date (issue 28), measured on a corpus of two real versions of the same laws.

    python bench/timetravel.py [--out DIR] [--smoke]

The corpus: the 272 current laws of ../shared/data/bwb and the 2012 texts of the 221 of them that the
2012 snapshot holds (read with --valid-on 2012-10-04), one BM25 articles index over it, and one over
the 272 alone for comparison. Printed, for the 51 dev questions (extractive answers, k 3):
- the share of citations whose version was valid on the day asked (today, and 2012-10-04): must be 1.0;
- article Hit@1 without a date on the two-version index and on the 272-law index (equal within .01),
  and as of 2012-10-04 (gold articles of laws the 2012 snapshot holds; a gold law whose only version
  began after 2012 cannot be right then);
- the time-travel set: the questions whose first cited article's text differs between its 2012 and its
  current version; as of 2012 the answer must quote the 2012 text, without a date the current one;
- questions about the laws with no version valid in 2012: how many abstain as of 2012, and how many
  cite a version that was not in force then (must be 0);
- the cost of the filter: warm search p50 with and without --date (ratio), cold `wetqa ask` with and
  without --date (ratio; a new process each, median of 3).
--smoke: the laws of the first dev questions, those questions, one cold run (seconds, for the suite).
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _bwb2012 import CURRENT, VALID_ON, law_id, linked_sources, smoke_old_texts, unpacked  # noqa: E402

from wetqa.corpus import BuildOptions, build_corpus  # noqa: E402
from wetqa.corpus.dataset import article_key, load_dataset  # noqa: E402
from wetqa.generation import Pipeline  # noqa: E402
from wetqa.generation.backends.extractive import ExtractiveBackend  # noqa: E402
from wetqa.retrieval import build_index, chunks_of, open_index  # noqa: E402
from wetqa.retrieval.engines.versions import article_versions, in_force  # noqa: E402
from wetqa.retrieval.scope import Scope  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
DEV = ROOT.parent / "shared" / "data" / "legalqa" / "dev.jsonl"


def valid_on(citation, day: str) -> bool:
    return in_force(citation.version_date, citation.valid_until, day)


def today() -> str:
    import datetime

    return datetime.date.today().isoformat()


def build(out: Path, smoke: bool) -> tuple[Path, Path, list]:
    items = load_dataset(DEV)
    current = sorted(CURRENT.glob("*.xml"))
    if smoke:
        items = items[:4]
        laws = {a.law_id for i in items for a in i.articles}
        current = [f for f in current if law_id(f) in laws]
    ids = {law_id(f) for f in current}
    if smoke:  # made from the current files: no archive to unpack in a smoke run
        old = smoke_old_texts(current, out / "old-texts")
    else:
        old = [f for f in sorted(unpacked().glob("*.xml")) if law_id(f) in ids]
    t0 = time.perf_counter()
    src = linked_sources(out / "src-both", current + old)
    report = build_corpus([src], out / "corpus-both", BuildOptions(valid_on=VALID_ON), progress=False)
    build_index(out / "corpus-both", "articles", out / "index-both", progress=False)
    alone = linked_sources(out / "src-current", current)
    build_corpus([alone], out / "corpus-current", BuildOptions(), progress=False)
    build_index(out / "corpus-current", "articles", out / "index-current", progress=False)
    print(
        f"corpus: {len(current)} current laws + {len(old)} of their 2012 texts: {report.laws} law versions, "
        f"{report.chunks} chunks; both indexes built or kept in {time.perf_counter() - t0:.0f} s"
    )
    return out / "index-both", out / "index-current", items


def answers(pipeline: Pipeline, items, scope):
    return [pipeline.ask(i.question, scope=scope) for i in items]


def hit1(items, runs) -> float:
    right = [
        bool(a.citations) and article_key(a.citations[0].law_id, a.citations[0].article) in i.gold_keys
        for i, a in zip(items, runs)
    ]
    return sum(right) / max(1, len(right))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, default=Path.home() / ".cache" / "wetqa-bench" / "timetravel")
    ap.add_argument("--smoke", action="store_true", help="the laws of four dev questions (seconds)")
    args = ap.parse_args()
    out = args.out / ("smoke" if args.smoke else "full")
    if args.smoke:
        print("smoke run: tiny sizes, figures not meaningful")
    both_path, alone_path, items = build(out, args.smoke)
    # The shipped ranking over each index (BM25 candidates; these indexes have no re-scoring model).
    both, alone = open_index(both_path), open_index(alone_path)
    store = chunks_of(both)
    held_2012 = {
        law for law, day in zip(both.laws.ids, both.laws.valid_from) if 0 < int(day) <= int(VALID_ON.replace("-", ""))
    }
    asked = {"today": None, VALID_ON: Scope(date=VALID_ON)}
    pipeline = Pipeline(both, ExtractiveBackend(), k=3, min_confidence=0.0)
    runs = {name: answers(pipeline, items, scope) for name, scope in asked.items()}
    runs_alone = answers(Pipeline(alone, ExtractiveBackend(), k=3, min_confidence=0.0), items, None)
    print("\n| measure | value |\n|---|---|")
    for name, scope in asked.items():
        day = scope.date if scope else today()
        cites = [c for a in runs[name] for c in a.citations]
        ok = sum(valid_on(c, day) for c in cites)
        print(f"| citations valid on the day asked ({name}) | {ok}/{len(cites)} = {ok / max(1, len(cites)):.3f} |")
    print(f"| dev Hit@1, no date, two-version index | {hit1(items, runs['today']):.3f} |")
    print(f"| dev Hit@1, no date, 272-law index | {hit1(items, runs_alone):.3f} |")
    in_2012 = [(i, a) for i, a in zip(items, runs[VALID_ON]) if {x.law_id for x in i.articles} <= held_2012]
    print(
        f"| dev Hit@1 as of {VALID_ON} (questions whose gold laws have a 2012 text: {len(in_2012)}) | "
        f"{hit1([i for i, _ in in_2012], [a for _, a in in_2012]):.3f} |"
    )
    # The time-travel set: the questions with a gold article whose 2012 and current texts differ. As of
    # 2012 a cited gold article must be quoted in its 2012 text; without a date, in its current text.
    travel, old_ok, old_cited, new_ok, new_cited, hit_then, hit_now = 0, 0, 0, 0, 0, 0, 0
    for i, then, now in zip(items, runs[VALID_ON], runs["today"]):
        differs = set()
        for key in i.gold_keys:
            law, article = key.split("|", 1)
            texts = {v.version_date: " ".join(v.text.split()) for v in article_versions(store, law, article)}
            if len(set(texts.values())) > 1:
                differs.add(key)
        if not differs:
            continue
        travel += 1
        for answer, day, is_old in ((then, VALID_ON, True), (now, today(), False)):
            cited = [c for c in answer.citations if article_key(c.law_id, c.article) in differs]
            good = [c for c in cited if valid_on(c, day) and (c.version_date <= VALID_ON) == is_old]
            if is_old:
                old_cited, old_ok = old_cited + len(cited), old_ok + len(good)
                hit_then += (
                    bool(answer.citations)
                    and article_key(answer.citations[0].law_id, answer.citations[0].article) in i.gold_keys
                )
            else:
                new_cited, new_ok = new_cited + len(cited), new_ok + len(good)
                hit_now += (
                    bool(answer.citations)
                    and article_key(answer.citations[0].law_id, answer.citations[0].article) in i.gold_keys
                )
    print(f"| time-travel set: dev questions whose gold article changed since 2012 | {travel} |")
    print(f"| ... as of {VALID_ON}: citations of a changed gold article quoting its 2012 text | {old_ok}/{old_cited} |")
    print(f"| ... without a date: citations of it quoting its current text | {new_ok}/{new_cited} |")
    print(
        f"| ... Hit@1 as of {VALID_ON} / without a date | {hit_then / max(1, travel):.3f} / {hit_now / max(1, travel):.3f} |"
    )
    later = [
        (i, a)
        for i, a in zip(items, answers(Pipeline(both, ExtractiveBackend(), k=3), items, asked[VALID_ON]))
        if not {x.law_id for x in i.articles} <= held_2012
    ]
    abstained = sum(a.abstained for _, a in later)
    wrong_version = sum(not valid_on(c, VALID_ON) for _, a in later for c in a.citations)
    print(f"| dev questions whose law has no 2012 text, as of {VALID_ON}: abstained | {abstained}/{len(later)} |")
    print(f"| ... citations of a version not in force then | {wrong_version} |")
    # The filter's cost: warm search, the same questions with and without the date, interleaved.
    questions = [i.question for i in items]
    for q in questions:
        both.search(q, 10)
        both.search(q, 10, asked[VALID_ON])
    plain, dated = [], []
    for _ in range(3):
        for q in questions:
            t0 = time.perf_counter()
            both.search(q, 10)
            plain.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            both.search(q, 10, asked[VALID_ON])
            dated.append(time.perf_counter() - t0)
    p_plain, p_dated = statistics.median(plain), statistics.median(dated)
    print(
        f"| warm search p50 without / with --date | {p_plain * 1000:.2f} / {p_dated * 1000:.2f} ms ({p_dated / p_plain:.2f}x) |"
    )
    from whole_bwb import serve_latency

    served = {
        name: serve_latency(both_path, questions[:8], 2.0 if args.smoke else 8.0, extra)
        for name, extra in (("without", None), ("with", {"date": VALID_ON}))
    }
    s0, s1 = served["without"]["p50"], served["with"]["p50"]
    print(
        f"| warm serve p50 without / with a date (`/v1/search`, 4 clients) | {s0:.1f} / {s1:.1f} ms ({s1 / s0:.2f}x) |"
    )
    cold = {"without": [], "with": []}
    base = [sys.executable, "-m", "wetqa", "ask", questions[0], "--index", str(both_path), "--generator", "extractive"]
    for _ in range(1 if args.smoke else 7):
        for name, extra in (("without", []), ("with", ["--date", VALID_ON])):
            t0 = time.perf_counter()
            subprocess.run(base + extra, check=True, capture_output=True)
            cold[name].append(time.perf_counter() - t0)
    c0, c1 = statistics.median(cold["without"]), statistics.median(cold["with"])
    print(f"| cold `wetqa ask` without / with --date | {c0:.2f} / {c1:.2f} s ({c1 / c0:.2f}x) |")


if __name__ == "__main__":
    main()
