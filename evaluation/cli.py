"""``wetqa eval retrieval`` (and the generation/reference evaluations as they land)."""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from wetqa.console import (
    EXIT_PARTIAL,
    EXIT_UNAVAILABLE,
    UsageError,
    bounded_int,
    check_model_ref,
    emit,
    positive_int,
)
from wetqa.retrieval import K_RANGE, MAX_K


def register(sub: argparse._SubParsersAction, output: argparse.ArgumentParser) -> None:
    p = sub.add_parser("eval", help="evaluate retrieval, generation or reference attribution")
    esub = p.add_subparsers(dest="eval_command", metavar="WHAT")
    esub.required = True
    for add in (_add_retrieval, _add_generation, _add_compare, _add_references, _add_claims):
        add(esub, output)


def _add_retrieval(esub: argparse._SubParsersAction, output: argparse.ArgumentParser) -> None:
    from wetqa.retrieval.spec import RetrievalSpec

    r = esub.add_parser("retrieval", parents=[output], help="R@k, Hit@k, nDCG@10, MRR at chunk and article level")
    r.add_argument("--dataset", required=True, help="questions with gold articles (JSONL)")
    RetrievalSpec.add_cli_args(r)
    r.add_argument("-k", default="1,3,5,10", help="cut-offs, comma-separated (article Hit@1 and MRR always)")
    r.add_argument("--threads", type=positive_int, default=2)
    r.add_argument(
        "--out", help="folder for metrics.json, run and qrels files (default runs/eval-retrieval/<index names>)"
    )
    r.set_defaults(func=cmd_eval_retrieval)


def _add_generation(esub: argparse._SubParsersAction, output: argparse.ArgumentParser) -> None:
    from . import scoring

    g = esub.add_parser(
        "generation", parents=[output], help="ROUGE-L, METEOR, citations, G-Eval, NLI citations of runs"
    )
    g.add_argument("--runs", nargs="+", required=True, metavar="DIR_OR_FILE", help="folders with run-N.jsonl, or files")
    g.add_argument("--dataset", required=True)
    g.add_argument("--corpus", help="corpus or index folder for chunk -> article mapping (default: the run's index)")
    scoring.add_cli_args(g)
    g.add_argument("--name", help="row name in the table (default: the first run folder's name)")
    g.add_argument("--out", help="results folder (default: <first run folder>/eval)")
    g.add_argument("--force", action="store_true", help="score again what was scored from other inputs")
    g.add_argument("--allow-failures", action="store_true", help="exit 0 even when some answers have no score")
    g.set_defaults(func=cmd_eval_generation)


def _add_compare(esub: argparse._SubParsersAction, output: argparse.ArgumentParser) -> None:
    from .significance import CORRECTIONS, DEFAULT_CORRECTION

    cmp = esub.add_parser(
        "compare",
        parents=[output],
        help="compare systems per question: paired 95%% intervals and significance tests against a baseline",
    )
    cmp.add_argument(
        "systems",
        nargs="+",
        metavar="RUN_FOLDER",
        help="two or more folders: of `generate` (answers), `eval generation` or `eval retrieval` (TREC runs)",
    )
    cmp.add_argument("--dataset", required=True, help="the questions with gold articles the runs answered")
    cmp.add_argument(
        "--metrics",
        help="comma-separated; answers: rougeL,meteor,article_recall,article_precision,article_hit (default), "
        "geval_*, nli_* from eval generation folders; retrieval: Hit@1,Hit@3,R@10,MRR,nDCG@10 (default), P@k",
    )
    cmp.add_argument("--baseline", help="the system the others are compared with (default: the first)")
    cmp.add_argument("--correction", default=DEFAULT_CORRECTION, choices=tuple(CORRECTIONS))
    cmp.add_argument("--level", default="article", choices=("article", "chunk"), help="retrieval runs: which run")
    cmp.add_argument("--corpus", help="corpus or index folder for answers' chunk -> article map (default: each run's)")
    cmp.add_argument("--seed", type=int, default=0, help="seed of the bootstrap and the randomization test")
    cmp.add_argument("--out", help="folder for compare.json, per_question.csv, table.md and plots")
    cmp.set_defaults(func=cmd_eval_compare)


def _add_references(esub: argparse._SubParsersAction, output: argparse.ArgumentParser) -> None:
    from .methods import ATTRIBUTION

    r2 = esub.add_parser("references", parents=[output], help="sentence-level reference attribution P/R/F1")
    r2.add_argument("--data", required=True, help="folder of <PARTY>.json files (or one file)")
    ATTRIBUTION.add_cli_args(r2, default="bm25")
    r2.add_argument("--threshold", type=float, help="selection threshold (default: the method's own)")
    r2.add_argument("--max-refs", type=int, help="select at most this many references per sentence")
    r2.add_argument(
        "--no-gold",
        choices=("exclude", "score"),
        default="exclude",
        help="items without gold references: left out of P/R/F1 (default) or scored 1 if nothing is predicted",
    )
    r2.add_argument("--out", default="runs/references", help="folder for metrics.json, sweep.json and pr_curve.png")
    r2.set_defaults(func=cmd_eval_references)


def _add_claims(esub: argparse._SubParsersAction, output: argparse.ArgumentParser) -> None:
    from .methods import SUPPORT

    c = esub.add_parser(
        "claims", parents=[output], help="claim-evidence support prediction on ExpertQA (AUROC, P/R/F1)"
    )
    c.add_argument("--data", required=True, help="folder of ExpertQA *.jsonl files (or one file)")
    SUPPORT.add_cli_args(c, default="overlap")
    c.add_argument("--threshold", type=float, help="decision threshold for 'Complete' (default: the method's own)")
    c.add_argument("--field", help="only questions of this ExpertQA field, e.g. Law")
    c.add_argument("--limit", type=positive_int, help="a seeded random sample of this many judgeable claims")
    c.add_argument("--seed", type=int, default=0)
    c.add_argument("--out", default="runs/expertqa", help="folder for metrics.json and the resumable scores file")
    c.add_argument("--no-progress", action="store_true")
    c.set_defaults(func=cmd_eval_claims)


def _ks(text: str) -> list[int]:
    if any(not part.strip() for part in text.split(",")):  # "1,,3": as --kind "," is, not read as 1,3
        raise UsageError(f"-k takes comma-separated positive numbers, got {text!r} (an empty value)")
    try:
        ks = sorted({int(x) for x in text.split(",")})
    except ValueError:
        raise UsageError(f"-k takes comma-separated positive numbers, got {text!r}") from None
    if not ks or ks[0] <= 0 or ks[-1] > MAX_K:
        raise UsageError(f"-k cut-offs: {K_RANGE}, got {text!r}")
    return ks


RETRIEVAL_FILES = ("run.chunk.trec", "run.article.trec", "qrels.chunk.txt", "qrels.article.txt", "metrics.json")


def cmd_eval_retrieval(args: argparse.Namespace) -> int:
    from wetqa.corpus.dataset import DatasetError, load_dataset
    from wetqa.io import own_folder, recognised, write_json
    from wetqa.retrieval.spec import RetrievalSpec

    from .ranking import article_qrels, chunk_qrels, evaluate_retrieval, write_qrels, write_trec_run

    ks = _ks(args.k)
    items = load_dataset(args.dataset)
    ungraded = [i.id for i in items if not i.gold_keys]
    if ungraded:  # it would count as a miss in every mean (trec_eval leaves such a question out; here it is named)
        raise DatasetError(
            f"{args.dataset}: question {ungraded[0]} names no gold article ({len(ungraded)} such of {len(items)}): "
            "eval retrieval scores articles; leave them out of the dataset"
        )
    spec = RetrievalSpec.from_cli_args(args)
    retriever = spec.build()
    # Not inside the index folder: a rebuild of the index replaces that folder whole.
    out = Path(args.out) if args.out else Path("runs") / "eval-retrieval" / "+".join(p.name for p in spec.index_paths)
    older = recognised("metrics.json", RETRIEVAL_FILES, lambda p: _has_keys(p, "chunk", "article", "retriever"))
    own_folder(out, RETRIEVAL_FILES, adopt=older)
    depth = max(max(ks), 10)  # nDCG@10 needs ten
    from wetqa.retrieval.conversation import contexts_of
    from wetqa.retrieval.pipeline import rank

    # A conversation's last user message is read in its context (a dataset of `messages`); a question alone.
    rankings = rank(retriever, [i.question for i in items], depth, args.threads, contexts=contexts_of(items, retriever))
    results = {item.id: r.hits for item, r in zip(items, rankings)}
    from wetqa.retrieval import chunks_of

    chunks = chunks_of(retriever)
    metrics = evaluate_retrieval(items, results, chunks, ks)
    # Questions about laws the index does not hold score as misses, as they should; said, so that a figure
    # is not read as the retriever's failure alone.
    held = {c.law_id for c in chunks}
    outside = [i for i in items if not {a.law_id for a in i.articles} & held]
    if outside:
        shown = ", ".join(f"{i.id} ({i.articles[0].law_id})" for i in outside[:3]) + (
            " ..." if len(outside) > 3 else ""
        )
        print(
            f"wetqa: warning: {len(outside)} of {len(items)} questions ask about laws the index does not hold (their "
            f"gold articles count as misses): {shown}",
            file=sys.stderr,
        )
    metrics["gold_outside_index"] = [i.id for i in outside]
    metrics["retriever"] = retriever.name
    metrics["indexes"] = [str(p) for p in spec.index_paths]
    metrics["dataset"] = str(args.dataset)
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


def _corpus_for(args: argparse.Namespace, run_paths: list[str]):
    from .answers import CorpusMap, RunFileError, find_run_files

    find_run_files(run_paths)  # a run folder that is not there is named first
    if args.corpus:
        return CorpusMap.from_folder(args.corpus)
    for p in map(Path, run_paths):
        cfg = (p if p.is_dir() else p.parent) / "config.json"
        if cfg.is_file():
            try:
                config = json.loads(cfg.read_text(encoding="utf-8"))
            except (UnicodeDecodeError, ValueError) as exc:
                raise RunFileError(f"{cfg} is not readable JSON ({exc}): pass --corpus DIR") from None
            indexes = (config.get("indexes") if isinstance(config, dict) else None) or []
            if indexes and Path(indexes[0]).is_dir():
                return CorpusMap.from_folder(indexes[0])
    raise RunFileError("cannot tell which corpus the runs cite: pass --corpus DIR (a corpus or index folder)")


def cmd_eval_generation(args: argparse.Namespace) -> int:
    from wetqa.corpus.dataset import load_dataset

    from .answers import evaluate_runs
    from .scoring import Scoring, from_cli_args, parse_metrics

    metrics = parse_metrics(args.metrics)
    items = load_dataset(args.dataset)
    corpus = _corpus_for(args, args.runs)
    first = Path(args.runs[0])
    out = Path(args.out) if args.out else (first if first.is_dir() else first.parent) / "eval"
    scoring = Scoring(metrics, from_cli_args(args), out / "cache")  # the judge's cache is made when written
    name = args.name or (first.name if first.is_dir() else first.parent.name)
    config = {"name": name, "dataset": str(args.dataset), **scoring.to_json()}
    result = evaluate_runs(args.runs, items, corpus, out, scoring, extra_config=config, force=args.force)
    for left in result["left_out_runs"]:
        print(
            f"wetqa: warning: {left['run']} answers {left['answered']} of the {left['of']} questions the other runs "
            "answer; left out of the mean over runs (finish it: run `wetqa generate` on its folder again)",
            file=sys.stderr,
        )
    for metric_name, why in result.get("not_scored", {}).items():
        print(f"wetqa: warning: {metric_name} not scored: {why}", file=sys.stderr)

    emit(args, result, lambda: _generation_text(result, name, out))
    return _generation_exit(args, result, out, scoring.unavailable())


def _generation_exit(args: argparse.Namespace, result: dict, out: Path, unreachable: list[str]) -> int:
    """1 when an answer has no complete score (a line or a question that could not be scored counts too;
    --allow-failures keeps 0 unless the runs held nothing to score at all), 3 when a judge was never reached."""
    failed, problems = result["failed"], result["problems"]
    if unreachable:
        print(
            f"wetqa: error: cannot reach {'; '.join(unreachable)}; the other metrics' scores are in {out}",
            file=sys.stderr,
        )
        return EXIT_UNAVAILABLE
    if result["scored"] + failed["count"] <= 0:  # not one answer of a question of the dataset in the runs
        where = "; ".join(f"{p['file']}: {p['problem']}" for p in problems[:2]) or "the run files hold no answers"
        print(f"wetqa: no answer was scored ({where})", file=sys.stderr)
        return EXIT_PARTIAL
    if (failed["count"] or problems) and not args.allow_failures:
        if failed["count"]:
            print(
                f"wetqa: {failed['count']} answer(s) have no complete score (e.g. {', '.join(failed['examples'][:3])}): "
                f"a failed generation or a metric that failed; details in {out / 'scores.jsonl'} (rerun to retry "
                "them, or pass --allow-failures)",
                file=sys.stderr,
            )
        if problems:
            first = problems[0]
            print(
                f"wetqa: {len(problems)} line(s) or question(s) of the run files could not be scored (e.g. "
                f"{first['file']}: {first['problem']}); listed in {out / 'metrics.json'} (or pass --allow-failures)",
                file=sys.stderr,
            )
        return EXIT_PARTIAL
    return 0


def _generation_text(result: dict, name: str, out: Path) -> str:
    from .answers import markdown_table
    from .metrics import table_columns

    lines = [markdown_table({name: result["summary"]}, answered={name: result["answered"]["min"]}).rstrip(), ""]
    lines += [
        f"{k:24} {v['mean']:7.2f} ± {v['std']:.2f} over {v['runs']} run(s), 95% interval over "
        f"{v.get('questions', '?')} questions [{v['ci95'][0]:.2f}, {v['ci95'][1]:.2f}]  (x100)"
        for k, v in result["summary"].items()
    ]
    if result.get("meteor_variant"):
        lines.append(f"METEOR variant: {result['meteor_variant']}")
    ab = result.get("abstention") or {}
    if ab.get("abstained"):
        answered = result.get("summary_answered") or {}
        shown = ", ".join(f"{label} {answered[k]['mean']:.1f}" for label, k in table_columns() if k in answered)
        lines.append(
            f"abstained: {ab['abstained']} answer(s), rate {ab['rate']:.1%} (scored 0 above); over answered: {shown}"
        )
    if ab.get("risk_coverage"):
        lines.append(
            "risk-coverage: "
            + ", ".join(f"{p['coverage']:.0%}: {p['risk']:.3f}" for p in ab["risk_coverage"])
            + (f" ({ab['risk_coverage_png']})" if ab.get("risk_coverage_png") else "")
        )
    if result["problems"]:
        lines.append(f"{len(result['problems'])} problem(s) in the run files, see {out / 'metrics.json'}")
    lines.append(f"(scores.jsonl, metrics.json, metrics.csv, table.md in {out})")
    return "\n".join(lines)


def cmd_eval_compare(args: argparse.Namespace) -> int:
    from wetqa.corpus.dataset import load_dataset
    from wetqa.io import atomic_file, own_folder, recognised, write_owned_json

    from .answers import CorpusMap, RunFileError
    from .compare import CompareError, compare, markdown, per_question_csv, plot

    keys = [m.strip() for m in args.metrics.split(",") if m.strip()] if args.metrics else None
    items = load_dataset(args.dataset)
    names = "-vs-".join(Path(p).name for p in args.systems[:4])
    out = Path(args.out) if args.out else Path("runs") / "compare" / names
    written = ("compare.json", "per_question.csv", "table.md", "means.png", "diffs.png")
    maps: dict[str, CorpusMap] = {}

    def corpus_for(path: Path) -> CorpusMap:
        ns = argparse.Namespace(corpus=args.corpus)
        key = args.corpus or str(path)
        if key not in maps:
            maps[key] = _corpus_for(ns, [str(path)])
        return maps[key]

    try:
        result = compare(
            args.systems, items, corpus_for, keys, args.baseline, args.correction, args.level, seed=args.seed
        )
    except (CompareError, RunFileError) as exc:
        raise UsageError(str(exc)) from None
    own_folder(
        out, written, adopt=recognised("compare.json", written)
    )  # after the comparison: a refused one makes none
    with atomic_file(out / "per_question.csv") as fh:
        fh.write(per_question_csv(result))
    with atomic_file(out / "table.md") as fh:
        fh.write(markdown(result))
    files = [out / "per_question.csv", out / "table.md", *plot(result, out), out / "compare.json"]
    report = {**result.to_json(), "files": [str(f) for f in files]}
    write_owned_json(out / "compare.json", report, "compare/1")
    for w in result.warnings:
        print(f"wetqa: warning: {w}", file=sys.stderr)

    def text() -> str:
        return markdown(result) + f"({result.engine}; files in {out})"

    emit(args, report, text)
    return 0


def _has_keys(path: Path, *keys: str) -> bool:
    """Whether a JSON file holds an object with these keys (how an older wetqa's unmarked results are known)."""
    try:
        d = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return isinstance(d, dict) and set(keys) <= set(d)


def cmd_eval_references(args: argparse.Namespace) -> int:
    from wetqa.io import own_folder, recognised, write_json

    from .methods import ATTRIBUTION
    from .references import compute_scores, load_reference_items, plot_pr_curve, score_items, sweep

    items, problems = load_reference_items(args.data)
    if not items:
        raise UsageError(f"no usable items in {args.data}: " + "; ".join(p["problem"] for p in problems[:3]))
    files = ("metrics.json", "sweep.json", "pr_curve.png")
    own_folder(args.out, files, adopt=recognised("metrics.json", files, lambda p: _has_keys(p, "per_party", "method")))
    attributor = ATTRIBUTION.from_cli_args(args)
    threshold = attributor.default_threshold if args.threshold is None else args.threshold
    scores, failed = compute_scores(attributor, items)
    result = score_items(items, scores, threshold, args.max_refs, args.no_gold)
    result.update(
        method=args.method, **ATTRIBUTION.given(args), problems=problems + failed, no_gold_policy=args.no_gold
    )
    thresholds = [round(0.05 * i, 2) for i in range(0, 21)]
    points = sweep(items, scores, thresholds, max_refs=args.max_refs, no_gold=args.no_gold)
    out = Path(args.out)
    write_json(out / "metrics.json", result)
    write_json(out / "sweep.json", points)
    plot_pr_curve(points, out / "pr_curve.png", f"{args.method} reference attribution ({result['n_scored']} items)")
    result["pr_curve"] = str(out / "pr_curve.png")

    def text() -> str:
        lines = [
            f"{args.method} at threshold {threshold}: P {result['precision']:.3f} R {result['recall']:.3f} "
            f"F1 {result['f1']:.3f} over {result['n_scored']} items "
            f"({result['no_gold_items']} without gold references, {args.no_gold}d)",
            "party   P      R      F1     published BM25 F1",
        ]
        for party, v in result["per_party"].items():
            pub = v["published_bm25_f1"]
            lines.append(
                f"{party:6} {v['precision']:.3f}  {v['recall']:.3f}  {v['f1']:.3f}  {pub if pub is not None else '-'}"
            )
        best = max(points, key=lambda p: p["f1"])
        lines.append(
            f"best F1 on the sweep: {best['f1']:.3f} at threshold {best['threshold']}; PR curve: {out / 'pr_curve.png'}"
        )
        if result["problems"]:
            lines.append(f"{len(result['problems'])} problem item(s) recorded in {out / 'metrics.json'}")
        return "\n".join(lines)

    emit(args, {k: v for k, v in result.items() if k != "items"}, text)
    return 0


def cmd_eval_claims(args: argparse.Namespace) -> int:
    from collections import Counter

    from wetqa.io import own_folder, write_json

    from .expertqa import choose, load_claims, score_claims, scores_file, support_metrics
    from .methods import SUPPORT

    if args.limit is not None and args.limit < 1:
        raise UsageError("--limit must be at least 1")
    try:
        items, problems = load_claims(args.data)
    except FileNotFoundError as exc:
        raise UsageError(str(exc)) from None
    chosen = choose(items, args.field, args.limit, args.seed)
    if not chosen:
        raise UsageError(f"no judgeable claims in {args.data}" + (f" for field {args.field!r}" if args.field else ""))
    scorer = SUPPORT.from_cli_args(args)
    model = SUPPORT.given(args).get("model")
    threshold = scorer.default_threshold if args.threshold is None else args.threshold
    out = Path(args.out)
    own_folder(
        out,
        (f"metrics_{args.method}.json", scores_file(out, args.method, model).name),
        adopt=lambda p: {e.name for e in p.glob("scores_*.jsonl")} | {e.name for e in p.glob("metrics_*.json")},
    )
    scores, failed = score_claims(scorer, chosen, scores_file(out, args.method, model), progress=not args.no_progress)
    scored = [i for i in chosen if i.key in scores]
    result = support_metrics([scores[i.key] for i in scored], [bool(i.label) for i in scored], threshold)
    result.update(
        method=args.method,
        model=model,
        field=args.field,
        limit=args.limit,
        seed=args.seed,
        claims_loaded=len(items),
        judgeable=sum(i.label is not None for i in items),
        support_labels=dict(Counter(str(i.support) for i in items)),
        worthiness_labels=dict(Counter(str(i.worthiness) for i in items)),
        failed=failed,
        problems=problems[:50],
        n_problems=len(problems),
    )
    write_json(out / f"metrics_{args.method}.json", result)

    def text() -> str:
        d, b = result["at_default"], result["best_macro_f1"]
        return "\n".join(
            [
                f"{args.method}{' (' + model + ')' if model else ''}: {result['n']} claims with evidence "
                f"({result['positive_rate']:.1%} 'Complete'); AUROC {result['auroc']}",
                f"at threshold {d['threshold']}: 'Complete' P {d['precision']:.3f} R {d['recall']:.3f} F1 {d['f1']:.3f}; "
                f"unsupported F1 {d['unsupported_f1']:.3f}; macro-F1 {d['macro_f1']:.3f}; accuracy {d['accuracy']:.3f}",
                f"best macro-F1 on the sweep: {b['macro_f1']:.3f} at {b['threshold']} (unsupported F1 {b['unsupported_f1']:.3f})",
                f"baselines: always 'Complete' macro-F1 {result['always_complete']['macro_f1']:.3f}; "
                f"majority accuracy {result['majority_accuracy']:.3f}",
                f"{len(failed)} claim(s) failed, {result['n_problems']} malformed; metrics in {out / f'metrics_{args.method}.json'}",
            ]
        )

    emit(args, result, text)
    return 0


def register_attribute(sub: argparse._SubParsersAction, output: argparse.ArgumentParser) -> None:
    from wetqa.retrieval.spec import RetrievalSpec

    from .claims import DEFAULT_UNIT, UNITS

    a = sub.add_parser(
        "attribute", parents=[output], help="add per-sentence or per-claim evidence to generated answers"
    )
    a.add_argument("--answers", required=True, help="a run file (run-N.jsonl) from `wetqa generate`")
    RetrievalSpec.add_cli_args(a)
    a.add_argument(
        "--unit",
        choices=tuple(UNITS),
        default=DEFAULT_UNIT,
        help="sentences; LLM atomic claims; or claims made independent with the question and answer",
    )
    a.add_argument(
        "--llm", help="LLM for claim prompts: a model on --llm-base-url / the OpenAI API, or transformers:PATH"
    )
    a.add_argument("--llm-base-url")
    a.add_argument("--classify", action="store_true", help="also judge check-worthiness and independence (needs --llm)")
    a.add_argument("--nli-model", help="label each evidence relation with this NLI model")
    a.add_argument("-k", type=bounded_int(1, MAX_K, K_RANGE), default=3, help="chunks searched per unit")
    a.add_argument("--out", required=True, help="JSONL with the answers and their evidence (resumable)")
    a.add_argument("--force", action="store_true", help="attribute again into an --out made with other inputs")
    a.set_defaults(func=cmd_attribute)


def cmd_attribute(args: argparse.Namespace) -> int:
    from wetqa.retrieval.spec import RetrievalSpec

    from .answers import RunFileError, load_run
    from .claims import UNITS, EvidenceFile

    if (UNITS[args.unit] is not None or args.classify) and not args.llm:  # an LLM splits the unit, or classifies
        raise UsageError(f"--unit {args.unit}{' and --classify' if args.classify else ''} need an LLM (--llm)")
    answers, out = Path(args.answers), Path(args.out)
    if out.exists() and answers.exists() and os.path.samefile(out, answers):  # a link or a hard link too
        raise UsageError(f"--out {out} is the --answers file: give the evidence a file of its own")
    records, problems = load_run(answers)
    if not records:
        why = (
            f"{len(problems)} bad line(s), e.g. line {problems[0]['line']}: {problems[0]['problem']}"
            if problems
            else "it is empty"
        )
        raise RunFileError(f"{answers}: no answer to attribute ({why})")
    spec = RetrievalSpec.from_cli_args(args)
    inputs = {"answers": str(answers.resolve()), "retrieval": spec.identity(), "unit": args.unit, "k": args.k,
              "llm": args.llm, "llm_base_url": args.llm_base_url, "classify": args.classify, "nli_model": args.nli_model}  # fmt: skip
    evidence = EvidenceFile(out, inputs, args.force)  # refused now, before any model loads; locked till the end
    try:
        return _attribute(args, spec, records, problems, evidence)
    finally:
        evidence.close()


def _attribute(args: argparse.Namespace, spec, records: list[dict], problems: list[dict], evidence) -> int:
    from wetqa.generation.runs import read_done

    from .claims import classify, find_evidence, segment

    out = evidence.out
    retriever = spec.build()
    complete = None
    if args.llm:
        from .llm import make_completer

        complete = make_completer(args.llm, args.llm_base_url)
    nli = None
    if args.nli_model:
        from .nli import NLIModel

        nli = NLIModel(check_model_ref(args.nli_model, "NLI model"))
    from wetqa.console import progress_bar

    failed = 0
    with evidence.open() as fh:  # emptied here when --force starts again: everything above has loaded
        done = read_done(out)
        for rec in progress_bar([r for r in records if str(r["id"]) not in done], desc="attributing", unit="answer"):
            row = {"id": rec["id"], "question": rec.get("question", ""), "answer": rec.get("answer", "")}
            try:
                claims = segment(row["answer"], row["question"], args.unit, complete)
                if args.classify and complete is not None:
                    classify(claims, row["question"], row["answer"], complete)
                find_evidence(claims, retriever, k=args.k, nli=nli)
                row["attribution"] = [c.to_json() for c in claims]
            except Exception as exc:  # noqa: BLE001 - one failing answer is recorded, the others go on
                row["error"] = f"{type(exc).__name__}: {exc}"
                failed += 1
            line = json.dumps(row, ensure_ascii=False) + "\n"
            fh.write(line.encode("utf-8"))
            fh.flush()
            evidence.written(line)
    total = len(read_done(out))
    emit(
        args,
        {"out": str(out), "answers": total, "failed": failed, "problems": problems},
        f"{total} answers with evidence in {out} ({failed} failed this run, {len(problems)} bad lines in the run file)",
    )
    return 0
