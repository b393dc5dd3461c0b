"""``wetqa questions``: write, check and show the questions each article answers (:mod:`.questions`)."""

from __future__ import annotations

import argparse
import hashlib
from collections import Counter
from dataclasses import replace
from pathlib import Path

from wetqa.console import emit, positive_int, shows_progress


def register(sub: argparse._SubParsersAction, output: argparse.ArgumentParser) -> None:
    q = sub.add_parser("questions", help="write and check the questions each article answers")
    commands = q.add_subparsers(dest="questions_command", metavar="COMMAND", required=True)

    w = commands.add_parser(
        "write",
        parents=[output],
        help="write N everyday questions per article with a language model (resumable, keyed by the article's text)",
    )
    w.add_argument("--corpus", type=Path, help="corpus folder (default $WETQA_HOME/corpus)")
    w.add_argument("--out", type=Path, required=True, help="the question set (JSONL) to write or to resume")
    w.add_argument("-n", type=positive_int, default=3, help="questions per article (default 3)")
    w.add_argument("--laws", help="only these laws (law ids, comma-separated)")
    w.add_argument("--limit", type=positive_int, help="only the first N articles not written yet")
    w.add_argument("--batch-size", type=positive_int, default=8, help="articles per call to the backend")
    w.add_argument("--writer", help="who wrote them, recorded with each article (default the model's name)")
    w.add_argument("--no-progress", action="store_true")
    _generator_args(w)
    w.set_defaults(func=cmd_write)

    c = commands.add_parser("check", parents=[output], help="count and check a question set")
    c.add_argument("file", type=Path)
    c.add_argument(
        "--against",
        type=Path,
        action="append",
        default=[],
        metavar="DATASET",
        help="a dataset (JSONL with `question`) the set must not copy: a written question at word Jaccard >= .6 to "
        "one of its questions is a problem (repeatable; the sets a ranking is evaluated on)",
    )
    c.set_defaults(func=cmd_check)

    s = commands.add_parser("show", parents=[output], help="the questions of an article (the shipped set by default)")
    s.add_argument("law_id")
    s.add_argument("article", help="its label, such as 'Artikel 5:6' (or 5:6)")
    s.add_argument("--set", type=Path, help="a question set file instead of the shipped one")
    s.set_defaults(func=cmd_show)


def _generator_args(parser: argparse.ArgumentParser) -> None:
    """The generator's flags, as ``ask`` and ``generate`` take them (one declaration: the backends' settings)."""
    from wetqa.settings import add_arguments

    from .presets import PRESETS
    from .registry import all_settings, backends

    g = parser.add_argument_group("generator")
    g.add_argument(
        "--generator", required=True, help=f"preset ({', '.join(PRESETS)}) or backend ({', '.join(backends())})"
    )
    g.add_argument("--backend", choices=tuple(backends()), help="run a preset on another engine")
    # Questions are sampled (0.7: varied questions), short: a model's default for answers is not wanted here.
    infos = [replace(s, default=None) if s.name in ("temperature", "max_tokens") else s for s in all_settings()]
    add_arguments(g, infos, seen=set(), defaults_in_help=False)


def _backend(args: argparse.Namespace):
    from wetqa.settings import given

    from .presets import make_backend, resolve_generator
    from .registry import all_settings

    settings = given(args, all_settings())
    temperature = settings.pop("temperature", None)
    max_tokens = settings.pop("max_tokens", None)
    config = resolve_generator(args.generator, backend=args.backend, **settings)
    return make_backend(config), (0.7 if temperature is None else temperature), (max_tokens or 400)


def cmd_write(args: argparse.Namespace) -> int:
    from wetqa.home import default_corpus

    from .questions import write_questions

    laws = [x.strip() for x in (args.laws or "").split(",") if x.strip()]
    backend, temperature, max_tokens = _backend(args)
    summary = write_questions(
        args.corpus or default_corpus(), args.out, backend, n=args.n, laws=laws, limit=args.limit,
        batch_size=args.batch_size, writer=args.writer or "", temperature=temperature, max_tokens=max_tokens,
        progress=shows_progress(not args.no_progress),
    )  # fmt: skip

    def text() -> str:
        line = (
            f"{summary['written']} articles given {summary['questions']} questions, {summary['skipped']} without "
            f"({summary['done_before']} of {summary['articles']} written before) in {summary['out']}"
        )
        if summary["failed"]:
            line += f"; {summary['failed']} failed ({summary['first_error']}): run again to retry them"
        return line

    emit(args, summary, text)
    return 1 if summary["failed"] else 0


def cmd_check(args: argparse.Namespace) -> int:
    from wetqa.retrieval.questions import QuestionSet, normalised, question_problem

    qset = QuestionSet.load(args.file)
    problems: Counter = Counter()
    shown: list[str] = []
    seen: Counter = Counter(normalised(q) for r in qset.rows for q in set(r.questions))
    for row in qset.rows:
        for q in row.questions:
            problem = question_problem(q) or ("written for two articles" if seen[normalised(q)] > 1 else None)
            if problem:
                problems[problem.split(" (")[0]] += 1
                if len(shown) < 20:
                    shown.append(f"{row.law_id} {row.article}: {problem}: {q}")
    if args.against:
        from wetqa.corpus.dataset import load_dataset
        from wetqa.retrieval.questions import asked_in, near_copies

        asked = asked_in([item for path in args.against for item in load_dataset(path)])
        written = [(row, q) for row in qset.rows for q in row.questions]
        for i, (j, jaccard) in near_copies([q for _, q in written], asked).items():
            problems["a near copy of an evaluation question"] += 1
            if len(shown) < 20:
                row, q = written[i]
                shown.append(f"{row.law_id} {row.article}: {q} ~ {asked[j]} ({jaccard:.2f})")
    with_q = [r for r in qset.rows if r.questions]
    skipped = Counter(r.skip for r in qset.rows if r.skip)
    summary = {
        "file": str(args.file),
        # Two names for two hashes: the file's bytes (what a run's identity records, models.questions) and its
        # content (the rows, however written: what an index records).
        "file_sha256": hashlib.sha256(Path(args.file).read_bytes()).hexdigest()[:16],
        "content_digest": qset.digest[:16],
        "articles": sum(1 for r in with_q if r.article),
        "questions": len(qset),
        "laws": len({r.law_id for r in with_q}),
        "whole_regulations": sum(1 for r in with_q if not r.article),
        "skipped": dict(skipped),
        "problems": dict(problems),
        "examples": shown,
    }

    def text() -> str:
        lines = [
            f"{summary['file']} (sha256 {summary['file_sha256']}, content {summary['content_digest']}): "
            f"{summary['questions']} questions for {summary['articles']} articles and {summary['whole_regulations']} "
            f"whole regulations of {summary['laws']} laws; {sum(skipped.values())} articles without"
        ]
        lines += [f"  {n} {p}" for p, n in problems.items()] + [f"  {e}" for e in shown]
        return "\n".join(lines)

    emit(args, summary, text)
    return 1 if problems else 0


def cmd_show(args: argparse.Namespace) -> int:
    from wetqa.retrieval import RetrievalError
    from wetqa.retrieval.engines.versions import article_label
    from wetqa.retrieval.questions import QuestionSet, shipped

    qset = QuestionSet.load(args.set) if args.set else shipped()
    if qset is None:
        raise RetrievalError("this wetqa ships no question set: give --set FILE")
    label = article_label(args.article)
    rows = qset.of_label(args.law_id, label)
    if not rows:
        raise RetrievalError(f"{args.law_id} {label}: no questions in {qset.source}")
    payload = {"law_id": args.law_id, "article": label, "versions": [r.to_json() for r in rows]}

    def text() -> str:
        out = []
        for r in rows:
            head = f"{r.law_id} {r.article} (text {r.text_hash}, {r.writer})"
            out.append(head + (f": none ({r.skip})" if r.skip else ""))
            out += [f"  {q}" for q in r.questions]
        return "\n".join(out)

    emit(args, payload, text)
    return 0
