"""The reader (EmbeddingGemma-300M): what it costs on these cores, how close its int8 graph stays to float32,
and what it does to the ranking, cross-validated (issue 42).

    python bench/reader.py [--index data/index] [--whole INDEX] [--reader MODEL] [--cost-only] [--smoke]

Printed, in one run:
- **precision**: articles read per second and the cosine with the float32 graph's vectors, for the float32 and
  the int8 graph, on 64 real articles (title: law, label and heading; the first 256 tokens);
- **laws read whole**: seconds per law with each graph, and what reading every law of an index takes (the
  272 laws; the whole BWB's 18,059 when ``--whole`` is given);
- **serving**: a ``wetqa serve`` with an empty vector cache asked 20 everyday questions one after the other
  (their candidates never read before): p50 and p95 of ``POST /v1/chat/completions``; and a cold ``wetqa ask``
  in a new process: seconds and peak memory;
- **quality** (unless ``--cost-only``): ``wetqa fit ranking`` and ``wetqa fit confidence`` over the indexes
  given (5 folds; the reader's pipelines): article and law Hit@1 per question set, whether the gold law is
  among the candidates, and the share abstained per set.
- **held out** (unless ``--cost-only``): the shipped models on ``bench/data/everyday_holdout.jsonl``, questions no
  fit is given, with the reader and without (``wetqa eval retrieval``): article Hit@1, Hit@3 and MRR.
``--smoke``: a tiny index and a tiny reader built here, a few questions, seconds.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))
sys.path.insert(0, str(ROOT))
DATA = ROOT / "bench" / "data"


def precision(index, model: str, n: int = 64) -> dict:
    """Articles/s and cosine with float32 for each graph, on ``n`` real articles of the index."""
    from wetqa.retrieval.articles.reader import READ_TOKENS, article_documents
    from wetqa.retrieval.models.onnx_encoder import OnnxEncoder

    rng = np.random.default_rng(0)
    longer = np.flatnonzero(np.asarray(index.count) >= 1)
    articles = rng.choice(longer, size=min(n, len(longer)), replace=False)
    texts, titles = article_documents(index, articles)
    encoder = OnnxEncoder(model, max_length=READ_TOKENS)
    docs = [encoder.document(t, ti) for t, ti in zip(texts, titles)]
    out = {}
    # The float32 graph (the model; passages, and the reader's questions, go through the int8 one), named:
    # without a session a text is read as a question, cut at its 128 tokens.
    encoder._encode(docs[:4], session=encoder.session)  # first runs allocate
    t0 = time.perf_counter()
    fp32 = encoder._encode(docs, session=encoder.session)
    out["fp32"] = {
        "articles_per_s": round(len(docs) / (time.perf_counter() - t0), 2),
        "cosine_mean": 1.0,
        "cosine_min": 1.0,
    }
    if encoder._passage_graph is not None:
        encoder.encode_formatted(docs[:4])
        t0 = time.perf_counter()
        int8 = encoder.encode_formatted(docs)
        seconds = time.perf_counter() - t0
        cos = (int8 * fp32).sum(1)
        out["int8"] = {"articles_per_s": round(len(docs) / seconds, 2), "cosine_mean": round(float(cos.mean()), 4),
                       "cosine_min": round(float(cos.min()), 4)}  # fmt: skip
    return out


def laws_cost(index, model: str, n: int = 40) -> dict:
    """Seconds per law read whole with each graph (on ``n`` of the index's laws), and for all of them."""
    from wetqa.retrieval.articles.reader import READ_TOKENS, law_documents
    from wetqa.retrieval.models.onnx_encoder import OnnxEncoder

    texts, titles = law_documents(index)
    pick = np.random.default_rng(1).choice(len(texts), size=min(n, len(texts)), replace=False)
    encoder = OnnxEncoder(model, max_length=READ_TOKENS)
    docs = [encoder.document(texts[i], titles[i]) for i in pick]
    out = {"laws": len(texts)}

    def fp32(texts):
        return encoder._encode(texts, session=encoder.session)

    for name, run in (("fp32", fp32), ("int8", encoder.encode_formatted)):
        run(docs[:2])
        t0 = time.perf_counter()
        run(docs)
        per = (time.perf_counter() - t0) / len(docs)
        out[name] = {"seconds_per_law": round(per, 4), "all_laws_minutes": round(per * len(texts) / 60, 1)}
    return out


# Run in a process of its own, whose only child is the command: RUSAGE_CHILDREN in the bench itself is the
# largest of every child it has waited for (the server it stopped a moment before among them).
_PEAK = (
    "import json, resource, subprocess, sys, time\n"
    "t0 = time.perf_counter()\n"
    "subprocess.run(sys.argv[1:], check=True, capture_output=True)\n"
    "print(json.dumps([time.perf_counter() - t0, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss]))\n"
)


def peak_mb_of(argv: list[str], env: dict | None) -> tuple[float, float]:
    """(seconds, peak resident MB) of a command run to its end in a new process."""
    out = subprocess.run([sys.executable, "-c", _PEAK, *argv], env=env, check=True, capture_output=True, cwd=ROOT)
    seconds, peak_kb = json.loads(out.stdout.decode().strip().splitlines()[-1])
    return seconds, peak_kb / 1024


def serving(index: str, reader: str, questions: list[str]) -> dict:
    """A server with an empty vector cache, asked questions one after the other (candidates never read)."""
    import httpx
    from fairness import start_server

    from tests.serving import free_port

    port = free_port()
    with tempfile.TemporaryDirectory(prefix="wetqa-reader-bench-") as cache:
        proc = start_server(index, port, cache, ("--reader", reader))
        url = f"http://127.0.0.1:{port}"
        try:
            model = httpx.get(url + "/v1/models").json()["data"][0]["id"]
            httpx.post(url + "/v1/chat/completions", json={"model": model, "messages": [{"role": "user",
                       "content": "Wat is de Grondwet?"}]}, timeout=600)  # fmt: skip  # loads every model
            times = []
            for q in questions:
                t0 = time.perf_counter()
                r = httpx.post(url + "/v1/chat/completions",
                               json={"model": model, "messages": [{"role": "user", "content": q}]}, timeout=600)  # fmt: skip
                r.raise_for_status()
                times.append(time.perf_counter() - t0)
        finally:
            proc.terminate()
            proc.wait(timeout=30)
        env = {**os.environ, "WETQA_CACHE": cache}
        cold_s, cold_mb = peak_mb_of([sys.executable, "-m", "wetqa", "ask", questions[0] + " (koud)", "--index", index,
                                      "--reader", reader], env)  # fmt: skip
    ordered = sorted(times)
    return {"questions": len(times), "p50_s": round(statistics.median(ordered), 2),
            "p95_s": round(ordered[int(0.95 * (len(ordered) - 1))], 2), "cold_ask_s": round(cold_s, 2),
            "cold_ask_peak_mb": round(cold_mb)}  # fmt: skip


def quality(indexes: list[str], reader: str, datasets: list[Path], folds: int) -> None:
    from wetqa.retrieval.fitting import ranking as fitting
    from wetqa.retrieval.ranking.confidence import FEATURES

    fitted = fitting.fit_ranking(indexes, datasets, folds, reader, progress=False, dense_only=True)
    for key, held in fitted["held"].items():
        print("\n" + fitting.report(key, held))
    signals = fitting.collect_signals(indexes, [*datasets, DATA / "post_2012.jsonl"], reader, progress=False)
    for key, rows in signals.items():
        if "+reader" not in key:
            continue
        budget = 0.05 if key.endswith("@whole") else 0.10
        _, cv = fitting.fit_confidence(rows, FEATURES, folds, budget)
        print(f"\n{key}: abstention, cross-validated (budget {budget:.2f}), AUC {cv['auc']:.3f}")
        for where, cell in cv["abstained"].items():
            print(f"  {where:50s} n={cell['n']:3d}  abstained {cell['abstained']:.1%}")


def held_out(indexes: list[str], reader: str) -> None:
    """The shipped models on the questions no fit is given (``everyday_holdout.jsonl``), each index with the
    reader and without."""
    dataset = DATA / "everyday_holdout.jsonl"
    print(f"\nheld out ({dataset.name}, never fitted on), the shipped models:")
    runs = [(index, name) for index in indexes for name in (reader, "none")]
    with tempfile.TemporaryDirectory(prefix="wetqa-held-out-") as out:
        for n, (index, name) in enumerate(runs):
            done = subprocess.run(
                [sys.executable, "-m", "wetqa", "eval", "retrieval", "--index", index, "--dataset", str(dataset),
                 "--reader", name, "--output", "json", "--out", str(Path(out) / str(n))],
                capture_output=True, text=True, check=True,
            )  # fmt: skip
            result = json.loads(done.stdout)
            a = result["article"]
            print(f"  {Path(index).name:14s} {result['retriever']:28s} n={result['n_questions']:3d}  Hit@1 "
                  f"{a['Hit@1']:.3f}  Hit@3 {a['Hit@3']:.3f}  MRR {a['MRR']:.3f}")  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--index", default=str(ROOT / "data" / "index"))
    ap.add_argument("--whole", help="an index of the whole BWB (its laws' cost and quality figures too)")
    ap.add_argument("--reader", default="google/embeddinggemma-300m")
    ap.add_argument("--cost-only", action="store_true", help="leave the cross-validated quality out")
    ap.add_argument("--folds", type=int, default=5)
    ap.add_argument("--smoke", action="store_true", help="a tiny index and reader built here: seconds")
    args = ap.parse_args()
    if args.smoke:
        return smoke(args)
    run(args)


def run(args: argparse.Namespace) -> None:
    from wetqa.retrieval import open_index
    from wetqa.retrieval.articles.reader import resolve_reader

    model = resolve_reader(args.reader)
    index = open_index(args.index, rescore=False)
    print(f"reader {args.reader} ({model}); {os.cpu_count()} cores")
    for name, figures in precision(index, model).items():
        print(f"  {name:5s} {figures['articles_per_s']:6.2f} articles/s   cosine with float32: mean "
              f"{figures['cosine_mean']:.4f}, min {figures['cosine_min']:.4f}")  # fmt: skip
    for label, path in (("272 laws", args.index), ("whole BWB", args.whole)):
        if path:
            cost = laws_cost(open_index(path, rescore=False), model)
            print(f"  laws read whole, {label} ({cost['laws']:,}): " + "; ".join(
                f"{g} {cost[g]['seconds_per_law']:.3f} s a law, {cost[g]['all_laws_minutes']:.1f} min for all"
                for g in ("fp32", "int8")))  # fmt: skip
    everyday = [json.loads(x)["question"] for x in (DATA / "everyday.jsonl").read_text(encoding="utf-8").splitlines()]
    figures = serving(args.index, model, everyday[-20:])
    print(f"  serving, candidates never read: p50 {figures['p50_s']:.2f} s, p95 {figures['p95_s']:.2f} s over "
          f"{figures['questions']} questions (goal p50 <= 2 s); cold ask {figures['cold_ask_s']:.2f} s, peak "
          f"{figures['cold_ask_peak_mb']} MB (goal <= 4 s, <= 1.5 GB)")  # fmt: skip
    if not args.cost_only:
        from cross_validate import DATASETS

        indexes = [args.index, *([args.whole] if args.whole else [])]
        quality(indexes, args.reader, [d for d in DATASETS if d.is_file()], args.folds)
        held_out(indexes, args.reader)


def smoke(args: argparse.Namespace) -> None:
    import _smoke

    from tests.tiny_models import tiny_gemma_embedding
    from wetqa.retrieval import build_index, open_index
    from wetqa.retrieval.tooling.export import export_onnx

    _smoke.announce("a tiny index, a tiny reader")
    with tempfile.TemporaryDirectory(prefix="wetqa-reader-smoke-") as tmp:
        work = Path(tmp)
        corpus = _smoke.corpus(work)
        reader = tiny_gemma_embedding(work / "reader")
        export_onnx(reader)
        os.environ["WETQA_CACHE"] = str(work / "cache")
        build_index(corpus, "articles", work / "index", progress=False, reader=str(reader))
        index = open_index(work / "index", rescore=False)
        print(json.dumps({"precision": precision(index, str(reader), n=8), "laws": laws_cost(index, str(reader), n=2)}))
        questions = [q["question"] for q in _smoke.questions(3)]
        print(json.dumps(serving(str(work / "index"), str(reader), questions)))


if __name__ == "__main__":
    main()
