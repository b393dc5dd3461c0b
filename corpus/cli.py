"""``wetqa corpus build|download|reference``."""

from __future__ import annotations

import argparse
from pathlib import Path

from wetqa.console import (
    EXIT_PARTIAL,
    UnavailableError,
    UsageError,
    emit,
    iso_date,
    non_negative_int,
    positive_float,
    positive_int,
)
from wetqa.home import default_corpus

# The downloader's limits (corpus.download imports httpx; its limits are repeated here so that
# `wetqa corpus --help` stays light, and checked equal by the tests).
MAX_FILE_MB = 200
DEADLINE = 600.0


def register(sub: argparse._SubParsersAction, output: argparse.ArgumentParser) -> None:
    p = sub.add_parser("corpus", help="build and download the law corpus")
    csub = p.add_subparsers(dest="corpus_command", metavar="ACTION")
    csub.required = True

    b = csub.add_parser("build", parents=[output], help="BWB XML -> articles.jsonl, chunks.jsonl, manifest.json")
    b.add_argument("--source", nargs="+", required=True, metavar="DIR_OR_FILE", help="law XML files or folders")
    b.add_argument(
        "--collection",
        default="bwb",
        metavar="NAME",
        help="the corpus source that reads the files (default bwb; others register under the wetqa.sources "
        "entry points)",
    )
    b.add_argument(
        "--out",
        type=Path,
        default=None,
        help="corpus folder to write (replaced atomically; default $WETQA_HOME/corpus, i.e. data/corpus)",
    )
    b.add_argument("--chunking", choices=("words150", "structured"), default="words150")
    b.add_argument(
        "--max-words", type=positive_int, default=None, help="word budget per chunk (150 for words150, 200 structured)"
    )
    b.add_argument(
        "--include-expired",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="keep expired (vervallen) articles; default: yes for words150, no for structured",
    )
    b.add_argument("--lowercase", action="store_true", help="lower-case chunk text like the published pipeline")
    b.add_argument(
        "--exclude-technical",
        action="store_true",
        help="leave out technical/administrative laws by title words (as the published pipeline)",
    )
    b.add_argument("--strict", action="store_true", help="stop at the first file that fails to parse")
    b.add_argument("--workers", type=_workers, default=0, help="parser processes (0: one per core)")
    b.add_argument(
        "--max-file-mb",
        type=positive_int,
        default=MAX_FILE_MB,
        help="skip (and list) a law file larger than this: parsing takes several times a file's size in memory",
    )
    b.add_argument(
        "--valid-on",
        type=iso_date,
        default=None,
        metavar="YYYY-MM-DD",
        help="files that state no version date (no date in the name or the XML) hold the text in force on this "
        "day (the 2012 snapshot: 2012-10-04); without it they are built with an empty date and listed as undated",
    )
    b.add_argument("--no-progress", action="store_true")
    b.set_defaults(func=cmd_build)

    d = csub.add_parser("download", parents=[output], help="fetch official XML of laws (current or at a date)")
    d.add_argument("bwb_ids", nargs="*", metavar="BWB_ID")
    d.add_argument("--date", help="the version valid on this date (YYYY-MM-DD); default: today")
    d.add_argument("--query", help="every law an SRU query finds, e.g. 'rechtsgebied==Strafrecht'")
    d.add_argument("--all", action="store_true", help="every regulation in force (on --date), via paged searches")
    d.add_argument("--concurrency", type=positive_int, default=4, help="requests under way at once (be polite)")
    d.add_argument("--no-progress", action="store_true")
    d.add_argument("--reference", action="store_true", help="download the 273 laws of the reference corpus")
    d.add_argument("--out", help="folder for the XML files (default: the cache, ~/.cache/wetqa/bwb)")
    d.add_argument("--timeout", type=positive_float, default=30.0, help="seconds a request may wait for the service")
    d.add_argument("--retries", type=non_negative_int, default=4)
    d.add_argument(
        "--max-file-mb",
        type=positive_int,
        default=MAX_FILE_MB,
        help="refuse a file (or search answer) larger than this",
    )
    d.add_argument(
        "--deadline",
        type=positive_float,
        default=DEADLINE,
        help="seconds one file may take in all, however it trickles",
    )
    d.set_defaults(func=cmd_download)


def _workers(text: str) -> int:
    value = int(text) if text.strip().lstrip("-").isdigit() else -1
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected 0 (one per core) or a number of processes, got {text!r}")
    return value


def _default_max_words(args: argparse.Namespace) -> int:
    if args.max_words is not None:
        return args.max_words
    return 150 if args.chunking == "words150" else 200


def cmd_build(args: argparse.Namespace) -> int:
    from .build import BuildOptions, CorpusBuildError, build_corpus
    from .chunking import ChunkingOptions

    opts = BuildOptions(
        chunking=ChunkingOptions(
            strategy=args.chunking,
            max_words=_default_max_words(args),
            include_expired=args.include_expired,
            lowercase=args.lowercase,
        ),
        exclude_technical=args.exclude_technical,
        strict=args.strict,
        workers=args.workers,
        max_file_mb=args.max_file_mb,
        valid_on=args.valid_on or "",
        collection=args.collection,
    )
    try:
        report = build_corpus(args.source, args.out or default_corpus(), opts, progress=not args.no_progress)
    except CorpusBuildError as exc:
        raise UsageError(str(exc)) from None

    def text() -> str:
        lines = [
            f"built {report.out}: {report.laws} laws, {report.articles} articles "
            f"({report.expired_articles} expired), {report.chunks} chunks in {report.seconds:.1f} s"
        ]
        if report.excluded:
            lines.append(
                f"excluded {len(report.excluded)} technical laws: " + ", ".join(e["title"] for e in report.excluded)
            )
        for s in report.skipped:
            lines.append(f"skipped {s['file']}: {s['reason']}")
        for d in report.duplicates:
            lines.append(f"left out {d['file']}: {d['reason']} ({d['kept']} kept)")
        if report.undated:
            dated = sum(1 for u in report.undated if u.get("valid_on"))
            lines.append(
                f"{len(report.undated)} file(s) state no version date: "
                + (f"dated {args.valid_on} (--valid-on)" if dated else "built with an empty date (give --valid-on)")
            )
        if report.failures:
            lines.append(f"{len(report.failures)} file(s) failed:")
            lines.extend(f"  {f}" for f in report.failures)
        return "\n".join(lines)

    emit(args, report.to_json(), text)
    return EXIT_PARTIAL if report.failures else 0


def cmd_download(args: argparse.Namespace) -> int:
    from wetqa.console import progress_bar

    from .download import (
        Client,
        DownloadError,
        DownloadUnavailable,
        check_date,
        default_cache_dir,
        download_law,
        download_query,
        in_force_query,
        reference_corpus,
    )

    try:
        check_date(args.date)  # before any request: the services would be asked for nothing
    except DownloadError as exc:
        raise UsageError(str(exc)) from None
    targets: list[tuple[str, str | None, str | None]] = [(i, args.date, None) for i in args.bwb_ids]
    if args.reference:
        targets += [(i, None, d) for i, d in reference_corpus()]
    query = in_force_query(args.date) if args.all else args.query
    if query and targets:
        raise UsageError("give BWB ids (or --reference), or --query/--all, not both")
    if not targets and not query:
        raise UsageError("name at least one BWB id (e.g. BWBR0002656), or pass --reference, --query or --all")
    out = args.out or default_cache_dir()  # shown; the download functions are given args.out (None: the cache)
    client = Client(
        timeout=args.timeout,
        retries=args.retries,
        concurrency=args.concurrency,
        max_bytes=args.max_file_mb << 20,
        deadline=args.deadline,
    )
    done: list[dict] = []
    failed: list[dict] = []
    try:
        if query:
            paths, failed = download_query(
                query, args.out, args.date, client, progress=not args.no_progress, workers=args.concurrency
            )
            done = [{"path": str(p)} for p in paths]
        else:
            for bwb_id, date, version in progress_bar(
                targets, progress=len(targets) >= 3 and not args.no_progress, unit="law", desc="downloading"
            ):
                try:
                    path = download_law(bwb_id, date, args.out, client=client, version_date=version)
                    done.append({"bwb_id": bwb_id, "path": str(path)})
                except DownloadUnavailable as exc:
                    raise UnavailableError(str(exc)) from None  # no point trying the other laws
                except DownloadError as exc:
                    if len(targets) == 1:
                        raise UsageError(str(exc)) from None
                    failed.append({"bwb_id": bwb_id, "error": str(exc)})
    finally:
        client.close()
    emit(
        args,
        {"downloaded": done, "failed": failed, "out": str(out)},
        lambda: "\n".join([*(d["path"] for d in done), *(f"FAILED {f['bwb_id']}: {f['error']}" for f in failed)]),
    )
    return EXIT_PARTIAL if failed else 0
