"""Conversations (issue 54): follow-ups read in the context of the turns before them, cross-validated, and
what reading the context costs.

    python bench/conversation.py [--index data/index] [--reader MODEL] [--folds 5] [--cost-only]
                                 [--quality-only] [--smoke]

Printed, in one run:
- **ranking, cross-validated** (``wetqa fit ranking`` over the dev, everyday and real questions and
  ``bench/data/conversations.jsonl``; 5 folds): right article first and right law first per kind of
  conversation (``same_article``, ``next_article``, ``other_law`` are follow-ups; ``standalone`` stands alone),
  in context and the same last message alone (ranked as a single question, never fitted on);
- **abstention, cross-validated** (``wetqa fit confidence``): the follow-ups abstained (goal <= 15%) and the
  single questions' rows beside them;
- **cost**: a warm ``wetqa serve`` asked each conversation's follow-up and the same conversation's first
  question alone, alternately, after a pass that filled the caches: p50 of each (goal: a follow-up <= 1.10x).
``--smoke``: a tiny index, a few conversations written here: seconds.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))
sys.path.insert(0, str(ROOT))
DATA = ROOT / "bench" / "data"
SHARED = ROOT.parent / "shared" / "data"
CONVERSATIONS = DATA / "conversations.jsonl"
SINGLE_SETS = [SHARED / "legalqa" / "dev.jsonl", DATA / "everyday.jsonl", DATA / "real.jsonl"]
FOLLOW_UPS = ("same_article", "next_article", "other_law")


def alone_set(conversations: Path, out: Path) -> Path:
    """Each conversation's last user message as a conversation of one message (ranked as a question alone by
    the fitting, never fitted on): what the follow-up gets without its context."""
    rows = [json.loads(line) for line in conversations.read_text(encoding="utf-8").splitlines() if line.strip()]
    with open(out, "w", encoding="utf-8") as fh:
        for r in rows:
            last = [m for m in r["messages"] if m["role"] == "user"][-1]
            fh.write(json.dumps({"id": r["id"] + "-alone", "messages": [last], "articles": r["articles"]},
                                ensure_ascii=False) + "\n")  # fmt: skip
    return out


def quality(index: str, reader: str, folds: int) -> None:
    from wetqa.retrieval.fitting import ranking as fitting

    kinds = {json.loads(x)["id"]: json.loads(x)["kind"] for x in CONVERSATIONS.read_text(encoding="utf-8").splitlines()}
    with tempfile.TemporaryDirectory(prefix="wetqa-conv-bench-") as tmp:
        alone = alone_set(CONVERSATIONS, Path(tmp) / "conversations_alone.jsonl")
        sets = [s for s in SINGLE_SETS if s.is_file()] + [CONVERSATIONS, alone]
        fitted = fitting.fit_ranking([index], sets, folds, reader if reader != "none" else None, progress=False,
                                     dense_only=True)  # fmt: skip
    in_context: dict[str, dict] = {}
    read_alone: dict[str, dict] = {}
    alone: dict[str, dict] = {}
    for key, held in fitted["held"].items():
        if reader != "none" and "+reader" not in key:
            continue
        print("\n" + fitting.report(key, held))
        for r in held:
            q = r["q"]
            if q.set == "conversations":
                # A follow-up is ranked by the +context models; one that changed the subject by the base ones.
                (in_context if "+context" in key else read_alone)[q.id] = r
            elif q.set == "conversations_alone":
                alone[q.id.removesuffix("-alone")] = r
    cells: dict[tuple[str, str], list[dict]] = defaultdict(list)
    for cid, kind in kinds.items():
        if cid in in_context or cid in read_alone:
            cells[(kind, "in context")].append(in_context.get(cid) or read_alone[cid])
        if cid in alone:
            cells[(kind, "alone")].append(alone[cid])
    print("\nconversations, cross-validated: right article first / right law first")
    for kind in (*FOLLOW_UPS, "standalone"):
        line = f"  {kind:13s}"
        for how in ("in context", "alone"):
            rs = cells.get((kind, how), [])
            if rs:
                hit = sum(r["hit1"] for r in rs)
                law = sum(r["law1"] for r in rs)
                line += (
                    f"  {how}: {hit:.0f}/{len(rs)} ({hit / len(rs):.3f}) law {law:.0f}/{len(rs)} ({law / len(rs):.3f})"
                )
        print(line)
    follow = [r for k in FOLLOW_UPS for r in cells.get((k, "in context"), [])]
    if follow:
        print(f"  follow-ups together: article {sum(r['hit1'] for r in follow) / len(follow):.3f} (goal >= .45), law "
              f"{sum(r['law1'] for r in follow) / len(follow):.3f} (goal >= .80), n={len(follow)}")  # fmt: skip


def abstention(index: str, reader: str, folds: int) -> None:
    from wetqa.retrieval.fitting import ranking as fitting
    from wetqa.retrieval.ranking.confidence import FEATURES

    sets = [s for s in SINGLE_SETS if s.is_file()] + [CONVERSATIONS, DATA / "out_of_corpus.jsonl",
                                                      DATA / "post_2012.jsonl"]  # fmt: skip
    signals = fitting.collect_signals([index], sets, reader if reader != "none" else None, progress=False)
    for key, rows in signals.items():
        if "+context" not in key or "+dense" not in key or (reader != "none" and "+reader" not in key):
            continue
        _, cv = fitting.fit_confidence(rows, FEATURES, folds, 0.10)
        print(f"\n{key}: abstention, cross-validated (budget 0.10), AUC {cv['auc']:.3f}")
        for where, cell in cv["abstained"].items():
            print(f"  {where:50s} n={cell['n']:3d}  abstained {cell['abstained']:.1%}")


def cost(index: str, reader: str) -> None:
    import httpx
    from fairness import start_server

    from tests.serving import free_port

    rows = [json.loads(x) for x in CONVERSATIONS.read_text(encoding="utf-8").splitlines() if x.strip()]
    rows = [r for r in rows if r["kind"] in FOLLOW_UPS][:40]
    port = free_port()
    with tempfile.TemporaryDirectory(prefix="wetqa-conv-cost-") as cache:
        proc = start_server(index, port, cache, ("--reader", reader))
        url = f"http://127.0.0.1:{port}"
        try:
            model = httpx.get(url + "/v1/models").json()["data"][0]["id"]

            def ask(messages) -> float:
                t0 = time.perf_counter()
                r = httpx.post(url + "/v1/chat/completions", json={"model": model, "messages": messages}, timeout=600)
                r.raise_for_status()
                return time.perf_counter() - t0

            singles = [[{"role": "user", "content": r["messages"][0]["content"]}] for r in rows]
            follows = [r["messages"] for r in rows]
            for s, f in zip(singles, follows):  # a pass that fills the caches (the reader's articles among them)
                ask(s), ask(f)
            single_t, follow_t = [], []
            for s, f in zip(singles, follows):
                single_t.append(ask(s))
                follow_t.append(ask(f))
        finally:
            proc.terminate()
            proc.wait(timeout=30)
    a, b = statistics.median(single_t), statistics.median(follow_t)
    print(f"\ncost, warm server ({len(rows)} conversations, alternately): single question p50 {a * 1000:.0f} ms, "
          f"follow-up with its context p50 {b * 1000:.0f} ms ({b / a:.2f}x; goal <= 1.10x)")  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--index", default=str(ROOT / "data" / "index"))
    ap.add_argument("--reader", default="google/embeddinggemma-300m")
    ap.add_argument("--folds", type=int, default=5)
    ap.add_argument("--cost-only", action="store_true")
    ap.add_argument("--quality-only", action="store_true")
    ap.add_argument("--smoke", action="store_true")
    args = ap.parse_args()
    if args.smoke:
        return smoke()
    from wetqa.retrieval.articles.reader import resolve_reader

    reader = resolve_reader(args.reader) if args.reader != "none" else "none"
    if not args.cost_only:
        quality(args.index, reader, args.folds)
        abstention(args.index, reader, args.folds)
    if not args.quality_only:
        cost(args.index, reader)


def smoke() -> None:
    """A tiny index and two conversations: their contexts and rankings, in seconds (tests/test_bench.py)."""
    import _smoke

    from wetqa.retrieval import build_index
    from wetqa.retrieval.conversation import Conversation
    from wetqa.retrieval.spec import RetrievalSpec

    _smoke.announce("a tiny index, two conversations")
    with tempfile.TemporaryDirectory(prefix="wetqa-conv-smoke-") as tmp:
        work = Path(tmp)
        corpus = _smoke.corpus(work)
        build_index(corpus, "articles", work / "index", progress=False, questions="none")
        pipeline = RetrievalSpec(index=(str(work / "index"),), reader="none").build()
        out = []
        for messages in (
            [{"role": "user", "content": "Wanneer kan de rechtbank het gezag beëindigen?"},
             {"role": "assistant", "content": "Volgens artikel 266 ..."}, {"role": "user", "content": "en daarna?"}],
            [{"role": "user", "content": "Wanneer kan de rechtbank het gezag beëindigen?"},
             {"role": "assistant", "content": "..."}, {"role": "user", "content": "iets anders: wat kost een verzoek?"}],
        ):  # fmt: skip
            conversation = Conversation.of(messages)
            context = conversation.context(pipeline.features.law_names if pipeline.features else None)
            (ranking,) = pipeline.rank([conversation.question], 3, contexts=[context])
            out.append({"context": context.to_json(conversation.question) if context else None,
                        "first": ranking.hits[0].chunk.article if ranking.hits else None})  # fmt: skip
        print(json.dumps(out, ensure_ascii=False))


if __name__ == "__main__":
    main()
