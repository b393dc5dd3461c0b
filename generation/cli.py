"""``wetqa ask`` and ``wetqa generate``."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from wetqa.console import EXIT_PARTIAL, UsageError, emit, non_negative_float, positive_int, wants_json

from ._base import Answer


def add_generator_args(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--generator",
        default="extractive",
        help="preset (extractive, gpt-4o, gpt-3.5-turbo, geitje-7b-ultra, llama-3-8b-dutch, fietje-2) "
        "or backend (transformers, vllm, openai)",
    )
    p.add_argument(
        "--backend",
        choices=("extractive", "openai", "transformers", "vllm"),
        help="run a preset on another engine (e.g. openai for a `vllm serve` server)",
    )
    p.add_argument("--model", help="model id or local path")
    p.add_argument("--base-url", help="OpenAI-compatible server, e.g. http://127.0.0.1:8000/v1")
    p.add_argument("--temperature", type=non_negative_float)
    p.add_argument("--max-tokens", type=positive_int)
    p.add_argument("--concurrency", type=positive_int)
    p.add_argument("--timeout", type=non_negative_float)
    p.add_argument("--max-model-len", type=positive_int)
    p.add_argument("--dtype", choices=("auto", "float32", "float16", "bfloat16"))
    p.add_argument("--tensor-parallel-size", type=positive_int, help="vllm: GPUs per model")
    p.add_argument("--pipeline-parallel-size", type=positive_int, help="vllm: pipeline stages (GPUs or machines)")
    p.add_argument("--data-parallel-size", type=positive_int, help="vllm: engine replicas")
    p.add_argument(
        "--distributed-executor-backend",
        choices=("ray", "mp", "uni", "external_launcher"),
        help="vllm: executor (ray for several machines)",
    )
    p.add_argument("-k", type=positive_int, default=3, help="retrieved chunks in the prompt")
    p.add_argument("--language", choices=("nl", "en"), default="nl", help="prompt language")


def generator_config(args: argparse.Namespace):
    from .presets import OVERRIDES, resolve_generator

    # Flags not given (or not defined for this command) are None and leave the preset's value.
    overrides = {key: getattr(args, key, None) for key in OVERRIDES}
    return resolve_generator(args.generator, backend=args.backend, model=args.model, **overrides)


def register(sub: argparse._SubParsersAction, output: argparse.ArgumentParser) -> None:
    from wetqa.retrieval.cli import add_retriever_args

    a = sub.add_parser("ask", parents=[output], help="answer a question with cited law articles")
    a.add_argument("question")
    add_retriever_args(a)
    add_generator_args(a)
    a.add_argument("--stream", action="store_true", help="print the answer as the generator writes it (text output)")
    a.set_defaults(func=cmd_ask)

    g = sub.add_parser("generate", parents=[output], help="answer every question of a dataset, N runs, resumable")
    g.add_argument("--dataset", required=True)
    add_retriever_args(g)
    add_generator_args(g)
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
    from wetqa.retrieval.cli import retriever_from_args

    from .pipeline import Pipeline, check_question
    from .presets import make_backend

    check_question(args.question)
    if args.stream and wants_json(args):
        raise UsageError("--stream prints text as it comes; leave out --output json (which prints one document)")
    cfg = generator_config(args)
    pipeline = Pipeline(retriever_from_args(args), make_backend(cfg), k=args.k, language=args.language)
    if args.stream:
        answer = None
        for item in pipeline.stream(args.question):
            if isinstance(item, Answer):
                answer = item
            else:
                print(item, end="", flush=True)
        assert answer is not None  # a stream always ends with its Answer
        print("\n\n" + sources(answer))
        return 0
    answer = pipeline.ask(args.question)
    print_answer(args, answer)
    return 0


def sources(answer: Answer) -> str:
    lines = []
    if answer.citations:
        lines.append("Bronnen:")
        for i, c in enumerate(answer.citations, 1):
            lines.append(f"[{i}] {c.law}, {c.article} ({c.doc_id}, {c.id})")
    else:
        lines.append("(geen bronnen aangehaald)")
    if not answer.format_ok:
        lines.append("(the model did not follow the ANSWER/DOC IDS format; parsed leniently)")
    return "\n".join(lines)


def print_answer(args: argparse.Namespace, answer: Answer) -> None:
    def text() -> str:
        return answer.answer + "\n\n" + sources(answer)

    emit(args, answer.to_json(), text)


def cmd_generate(args: argparse.Namespace) -> int:
    from wetqa.dataset import load_dataset
    from wetqa.retrieval import index_identity
    from wetqa.retrieval.cli import index_paths, retriever_from_args

    from .pipeline import Pipeline
    from .presets import make_backend
    from .runs import check_run_folder, generate_runs, run_inputs

    items = load_dataset(args.dataset)
    if args.limit:
        items = items[: args.limit]
    cfg = generator_config(args)
    retriever = retriever_from_args(args)
    query_options = {
        k: getattr(args, k, None) for k in ("fusion", "weights", "rescore", "rescore_weight", "rescore_depth", "rerank")
    }
    inputs = run_inputs(
        retriever.name,
        args.k,
        args.language,
        cfg.to_json(),
        [index_identity(p) for p in index_paths(args)],
        query_options,
    )
    check_run_folder(args.out, inputs, args.force)  # before a model is loaded for nothing
    pipeline = Pipeline(retriever, make_backend(cfg), k=args.k, language=args.language)
    config = {
        # Absolute paths: the folder is evaluated correctly from any working directory.
        "dataset": str(Path(args.dataset).resolve()),
        "indexes": [str(i.resolve()) for i in index_paths(args)],
        "fusion": args.fusion,
        "generator": args.generator,
        "generator_config": cfg.to_json(),
        "language": args.language,
    }
    summary = generate_runs(
        pipeline, items, args.out, runs=args.runs, config=config, batch_size=args.batch_size, inputs=inputs
    )

    def text() -> str:
        return "\n".join(
            f"run {r['run']}: {r['questions']} answers in {r['file']} ({r['failed']} failed, "
            f"{r['parse_failures']} not in the ANSWER/DOC IDS format, {r['dropped_ids']} cited ids not retrieved)"
            for r in summary["runs"]
        )

    emit(args, summary, text)
    failed = sum(r["failed"] for r in summary["runs"])
    if failed and not args.allow_failures:
        files = ", ".join(r["file"] for r in summary["runs"] if r["failed"])
        print(
            f"wetqa: {failed} answer(s) failed; their errors are recorded in {files} "
            "(rerun to retry them, or pass --allow-failures)",
            file=sys.stderr,
        )
        return EXIT_PARTIAL
    return 0
