"""``wetqa ask`` and ``wetqa generate``: a :class:`~.spec.PipelineSpec` from the flags, built and run."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from wetqa.console import EXIT_PARTIAL, EXIT_UNAVAILABLE, UsageError, emit, positive_int, wants_json

from ._base import Answer, StreamedSentence


def register_ask(sub: argparse._SubParsersAction, output: argparse.ArgumentParser) -> None:
    from .spec import PipelineSpec

    a = sub.add_parser("ask", parents=[output], help="answer a question with cited law articles")
    a.add_argument("question")
    PipelineSpec.add_cli_args(a)
    a.add_argument("--stream", action="store_true", help="print the answer as the generator writes it (text output)")
    a.set_defaults(func=cmd_ask)


def register_generate(sub: argparse._SubParsersAction, output: argparse.ArgumentParser) -> None:
    from .spec import PipelineSpec

    g = sub.add_parser("generate", parents=[output], help="answer every question of a dataset, N runs, resumable")
    g.add_argument("--dataset", required=True)
    PipelineSpec.add_cli_args(g)
    g.add_argument("--runs", type=positive_int, default=1)
    g.add_argument("--out", required=True, help="folder for run-N.jsonl and config.json")
    g.add_argument("--batch-size", type=positive_int, default=16)
    g.add_argument("--limit", type=positive_int, help="only the first N questions")
    g.add_argument(
        "--force",
        action="store_true",
        help="start the runs again when the folder holds runs made "
        "with other inputs (index, generator, sampling, k, prompt)",
    )
    g.add_argument(
        "--allow-failures",
        action="store_true",
        help="exit 0 even when some questions failed (for sweeps); they are recorded in the run files",
    )
    g.set_defaults(func=cmd_generate)


def cmd_ask(args: argparse.Namespace) -> int:
    from .pipeline import check_question
    from .spec import PipelineSpec

    check_question(args.question)
    if args.stream and wants_json(args):
        raise UsageError("--stream prints text as it comes; leave out --output json (which prints one document)")
    pipeline = PipelineSpec.from_cli_args(args).build()
    if args.stream:
        answer, sentences = None, 0
        for item in pipeline.stream(args.question):
            if isinstance(item, Answer):
                answer = item
            elif isinstance(item, StreamedSentence):  # structured: each sentence once written, with its [n]
                print((" " if sentences else "") + item.render(), end="", flush=True)
                sentences += 1
            else:
                print(item, end="", flush=True)
        assert answer is not None  # a stream always ends with its Answer
        print("\n\n" + sources(answer))
        return 0
    answer = pipeline.ask(args.question)
    print_answer(args, answer)
    return 0


def sources(answer: Answer) -> str:
    from wetqa.corpus.text import dutch_date

    lines = []
    if answer.abstained:
        return "(niet beantwoord uit het corpus: niets aangehaald)"
    if answer.citations:
        lines.append("Bronnen:")
        for i, c in enumerate(answer.citations, 1):
            # A structured answer's [n] is the source's rank among the retrieved hits (ALCE's convention).
            n = answer.marker(c.doc_id) if answer.structured else i
            dated = f", tekst van {dutch_date(c.version_date)}" if c.version_date else ""
            lines.append(f"[{n}] {c.law}, {c.article}{dated} ({c.doc_id}, {c.id})")
        if answer.validity_note:
            lines.append(answer.validity_note)
    else:
        lines.append("(geen bronnen aangehaald)")
    if answer.note:
        lines.append(f"({answer.note})")
    elif not answer.format_ok:
        lines.append("(the model did not follow the ANSWER/DOC IDS format; parsed leniently)")
    return "\n".join(lines)


def print_answer(args: argparse.Namespace, answer: Answer) -> None:
    def text() -> str:
        return answer.answer + "\n\n" + sources(answer)

    emit(args, answer.to_json(), text)


def cmd_generate(args: argparse.Namespace) -> int:
    from wetqa.corpus.dataset import load_dataset

    from .presets import make_backend
    from .runs import check_run_folder, generate_runs
    from .spec import PipelineSpec

    items = load_dataset(args.dataset)
    if args.limit:
        items = items[: args.limit]
    spec = PipelineSpec.from_cli_args(args)
    retriever = spec.retrieval.build()
    inputs = spec.inputs()
    check_run_folder(args.out, inputs, args.force, items)  # before a model is loaded for nothing
    pipeline = spec.build(retriever, make_backend(spec.generator))
    config = {
        # Absolute paths: the folder is evaluated correctly from any working directory.
        "dataset": str(Path(args.dataset).resolve()),
        "indexes": [str(i.resolve()) for i in spec.retrieval.index_paths],
        "fusion": spec.retrieval.fusion,
        "generator": spec.generator.name,
        "generator_config": spec.generator.to_json(),
        "language": spec.language,
        "spec": spec.to_json(),
        "spec_hash": spec.digest(),
    }
    summary = generate_runs(
        pipeline, items, args.out, runs=args.runs, config=config, batch_size=args.batch_size, inputs=inputs
    )

    def text() -> str:
        return "\n".join(
            f"run {r['run']}: {r['questions']} answers in {r['file']} ({r['failed']} failed, {r['structured']} "
            f"structured, {r['parse_failures']} not in their format, {r['dropped_ids']} cited ids not retrieved)"
            for r in summary["runs"]
        )

    emit(args, summary, text)
    failed = sum(r["failed"] for r in summary["runs"])
    if failed and not args.allow_failures:
        files = ", ".join(r["file"] for r in summary["runs"] if r["failed"])
        first = next(r["first_error"] for r in summary["runs"] if r["failed"])
        print(
            f"wetqa: {failed} answer(s) failed (first: {first}); their errors are recorded in {files} "
            "(rerun to retry them, or pass --allow-failures)",
            file=sys.stderr,
        )
        answered = sum(r["questions"] - r["failed"] for r in summary["runs"])
        if not answered and failed == sum(r.get("unavailable", 0) for r in summary["runs"]):
            return EXIT_UNAVAILABLE  # nothing answered because the model server is not there
        return EXIT_PARTIAL
    return 0
