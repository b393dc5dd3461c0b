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
    a.add_argument(
        "--context",
        action="append",
        metavar="EARLIER_QUESTION",
        help="a question asked before this one (repeat for several, oldest first): the question is read as its "
        'follow-up ("en als ik parttime werk?")',
    )
    a.set_defaults(func=cmd_ask)


def register_chat(sub: argparse._SubParsersAction, output: argparse.ArgumentParser) -> None:
    from .spec import PipelineSpec

    c = sub.add_parser(
        "chat",
        parents=[output],
        help="a conversation: each question read in the context of the ones before (/nieuw starts afresh)",
        description='Ask questions one after another; a follow-up ("en als ik 17 ben?") is read with the earlier '
        "questions and the articles the answers cited. /nieuw starts a new conversation, /stop (or Ctrl-D) ends. "
        "With --output json each answer is one JSON line.",
    )
    PipelineSpec.add_cli_args(c)
    c.set_defaults(func=cmd_chat)


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
    for earlier in args.context or ():
        if not earlier.strip():
            raise UsageError("--context: an earlier question must not be blank")
    pipeline = PipelineSpec.from_cli_args(args).build()
    context = None
    if args.context:
        messages = [{"role": "user", "content": q} for q in [*args.context, args.question]]
        context = pipeline.conversation_of(messages)[1]
    if args.stream:
        answer, sentences = None, 0
        for item in pipeline.stream_request(pipeline.prepare(args.question, context=context)):
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
    answer = pipeline.ask(args.question, context=context)
    print_answer(args, answer)
    return 0


NEW_CONVERSATION = ("/nieuw", "/new")
END = ("/stop", "/exit", "/quit")


def cmd_chat(args: argparse.Namespace) -> int:
    """A conversation on the terminal: readline history (kept in the cache folder), /nieuw, /stop."""
    import json

    from wetqa.home import cache_root
    from wetqa.retrieval import RetrievalError
    from wetqa.retrieval.conversation import CONTEXT_TURNS, ConversationError

    from ._base import GenerationError, ModelUnavailable, UpstreamTimeout
    from .spec import PipelineSpec

    pipeline = PipelineSpec.from_cli_args(args).build()
    interactive = sys.stdin.isatty()
    history = None
    if interactive:
        try:
            import readline

            history = cache_root() / "chat_history"
            if history.is_file():
                readline.read_history_file(history)
        except (ImportError, OSError):
            history = None
        print("wetqa chat: stel een vraag (/nieuw begint opnieuw, /stop of Ctrl-D stopt)", file=sys.stderr)
    messages: list[dict] = []
    failed = 0
    try:
        while True:
            try:
                line = input("vraag> " if interactive else "")
            except EOFError:
                break
            question = line.strip()
            if not question:
                continue
            if question.lower() in END:
                break
            if question.lower() in NEW_CONVERSATION:
                messages = []
                if interactive:
                    print("(nieuw gesprek)", file=sys.stderr)
                continue
            messages.append({"role": "user", "content": question})
            try:
                try:
                    request = pipeline.converse(messages)
                except GenerationError as exc:
                    if not isinstance(exc.__cause__, ConversationError):
                        raise
                    # Grown past what is read: start afresh with this question, and say so.
                    print(f"wetqa: {str(exc).split(' (start a new')[0]}: nieuw gesprek begonnen", file=sys.stderr)
                    messages = [messages[-1]]
                    request = pipeline.converse(messages)
                answer = pipeline.answer_one(request)
            except (GenerationError, RetrievalError) as exc:  # one question failed: say so, the chat goes on
                if isinstance(exc, ModelUnavailable) and not isinstance(exc, UpstreamTimeout):
                    raise  # the model server is not there: no question can be answered (exit 3)
                messages.pop()  # the question was not answered: the next is not its follow-up
                print(f"wetqa: {exc}", file=sys.stderr)
                failed += 1
                continue
            messages.append({"role": "assistant", "content": answer.answer + "\n\n" + sources(answer)})
            # Only the latest exchanges are read as context: older ones are not kept (nor sent on).
            messages = messages[-2 * CONTEXT_TURNS :]
            if wants_json(args):
                print(json.dumps(answer.to_json(), ensure_ascii=False), flush=True)
            else:
                read = answer.context
                if read:
                    print(f"(gelezen als: {read['standalone_question']})")
                print(answer.answer + "\n\n" + sources(answer) + "\n", flush=True)
    finally:
        if history is not None:
            import contextlib
            import readline

            with contextlib.suppress(OSError):
                history.parent.mkdir(parents=True, exist_ok=True)
                readline.write_history_file(history)
    return 1 if failed else 0  # a question that failed was said on stderr; the others were answered


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
