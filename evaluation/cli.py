"""``wetqa eval retrieval`` (and the generation/reference evaluations as they land)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from wetqa.cli import UsageError, emit


def register(sub: argparse._SubParsersAction, output: argparse.ArgumentParser) -> None:
    p = sub.add_parser("eval", help="evaluate retrieval, generation or reference attribution")
    esub = p.add_subparsers(dest="eval_command", metavar="WHAT")
    esub.required = True

    from retrieval.cli import add_retriever_args

    r = esub.add_parser("retrieval", parents=[output], help="R@k, Hit@k, nDCG@10, MRR at chunk and article level")
    r.add_argument("--dataset", required=True, help="questions with gold articles (JSONL)")
    add_retriever_args(r)
    r.add_argument("-k", default="3,5,10", help="cut-offs, comma-separated")
    r.add_argument("--threads", type=int, default=2)
    r.add_argument("--out", help="folder for metrics.json, run and qrels files (default: beside the first index)")
    r.set_defaults(func=cmd_eval_retrieval)


def _ks(text: str) -> list[int]:
    try:
        ks = sorted({int(x) for x in text.split(",") if x.strip()})
    except ValueError:
        raise UsageError(f"-k takes comma-separated positive numbers, got {text!r}") from None
    if not ks or ks[0] <= 0:
        raise UsageError(f"-k values must be positive, got {text!r}")
    return ks


def cmd_eval_retrieval(args: argparse.Namespace) -> int:
    from retrieval.cli import retriever_from_args
    from wetqa.io import write_json

    from .dataset import load_dataset
    from .retrieval import article_qrels, chunk_qrels, evaluate_retrieval, write_qrels, write_trec_run

    ks = _ks(args.k)
    items = load_dataset(args.dataset)
    retriever = retriever_from_args(args)
    depth = max(max(ks), 10)  # nDCG@10 needs ten
    hits = retriever.batch_search([i.question for i in items], depth, threads=args.threads)
    results = {item.id: h for item, h in zip(items, hits)}
    chunks = getattr(retriever, "chunks", None) or next(r.chunks for r in retriever.retrievers)
    metrics = evaluate_retrieval(items, results, chunks, ks)
    metrics["retriever"] = retriever.name
    metrics["indexes"] = [str(p) for p in args.index]
    metrics["dataset"] = str(args.dataset)
    out = Path(args.out) if args.out else Path(args.index[0]) / "eval"
    write_trec_run(out / "run.chunk.trec", results, retriever.name, "chunk")
    write_trec_run(out / "run.article.trec", results, retriever.name, "article")
    write_qrels(out / "qrels.chunk.txt", chunk_qrels(items, chunks))
    write_qrels(out / "qrels.article.txt", article_qrels(items))
    write_json(out / "metrics.json", metrics)

    def text() -> str:
        names = list(metrics["chunk"])
        lines = [f"{retriever.name} on {len(items)} questions", "level    " + " ".join(f"{n:>8}" for n in names)]
        for level in ("chunk", "article"):
            lines.append(f"{level:8} " + " ".join(f"{metrics[level][n]:8.3f}" for n in names))
        lines.append(f"(run, qrels and metrics.json in {out})")
        return "\n".join(lines)

    emit(args, metrics, text)
    return 0
