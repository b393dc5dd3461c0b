"""A grid of retrievers x generators x k x runs, from one config, ending in the published table shape.

Indexes, runs and scores live under the output folder and are reused: a
re-run after an interruption builds nothing twice, generates only missing
answers and scores only missing ones.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from tqdm import tqdm

from wetqa.corpus import BuildOptions, ChunkingOptions, build_corpus
from wetqa.corpus.build import MANIFEST
from wetqa.generation import Pipeline, make_backend, resolve_generator
from wetqa.generation.runs import generate_runs
from wetqa.retrieval import build_index, chunks_of, open_index
from wetqa.retrieval.fusion import HybridRetriever

from .config import ExperimentConfig
from .console import UsageError, emit
from .dataset import load_dataset
from .evaluation.answers import CorpusMap, csv_text, evaluate_runs, markdown_table
from .evaluation.ranking import evaluate_retrieval
from .io import atomic_file, write_json


def _corpus_dir(cfg: ExperimentConfig, out: Path) -> Path:
    src = Path(cfg.corpus)
    if (src / MANIFEST).is_file():
        return src
    target = out / "corpus"
    opts = BuildOptions(chunking=ChunkingOptions(cfg.chunking, 150 if cfg.chunking == "words150" else 200))
    if not (target / MANIFEST).is_file():
        build_corpus([src], target, opts)
    return target


def run_experiment(cfg: ExperimentConfig, judge_scorer=None, nli_scorer=None) -> dict:
    out = Path(cfg.out)
    out.mkdir(parents=True, exist_ok=True)
    write_json(out / "config.json", cfg.to_json())
    items = load_dataset(cfg.dataset)
    corpus = _corpus_dir(cfg, out)

    retrievers = {}
    for spec in tqdm([r for r in cfg.retrievers if not r.components], desc="indexes", unit="index"):
        idx = out / "indexes" / spec.name
        options = {"model": spec.model} if spec.retriever == "dense" and spec.model else None
        rescore = {"model": spec.rescore} if spec.rescore else None
        build_index(corpus, spec.retriever, idx, options, progress=False, rescore=rescore)
        retrievers[spec.name] = open_index(idx)
    for spec in cfg.retrievers:
        if spec.components:
            retrievers[spec.name] = HybridRetriever([retrievers[c] for c in spec.components], spec.fusion, spec.weights)
    chunk_map = CorpusMap(chunks_of(next(iter(retrievers.values()))))

    retrieval_rows = {}
    for name, r in retrievers.items():
        hits = r.batch_search([i.question for i in items], 10, threads=2)
        retrieval_rows[name] = evaluate_retrieval(items, {i.id: h for i, h in zip(items, hits)}, chunks_of(r))

    rows: dict[str, dict] = {}
    grid = [(r, g, k) for r in cfg.retrievers for g in cfg.generators for k in cfg.k]
    for rspec, gspec, k in tqdm(grid, desc="grid", unit="config"):
        gen_cfg = resolve_generator(
            gspec.generator,
            backend=gspec.backend,
            model=gspec.model,
            base_url=gspec.base_url,
            temperature=gspec.temperature,
            max_tokens=gspec.max_tokens,
        )
        label = f"{rspec.name}+{gspec.name}@k{k}"
        run_dir = out / "runs" / f"{rspec.name}__{gspec.name}__k{k}"
        pipeline = Pipeline(retrievers[rspec.name], make_backend(gen_cfg), k=k)
        generate_runs(
            pipeline,
            items,
            run_dir,
            runs=cfg.runs,
            progress=False,
            config={"retriever": rspec.name, "generator": gspec.name, "generator_config": gen_cfg.to_json()},
        )
        result = evaluate_runs(
            [run_dir],
            items,
            chunk_map,
            run_dir / "eval",
            cfg.metrics,
            judge_scorer,
            nli_scorer,
            progress=False,
            extra_config={"name": label},
        )
        rows[label] = result["summary"]

    table = markdown_table(rows)
    with atomic_file(out / "table.md") as fh:
        fh.write(
            f"# {cfg.name}: {len(items)} questions, {cfg.runs} run(s), mean ± std x100\n\n{table}\n"
            "R, P, Hit: citations at article level.\n"
        )
    with atomic_file(out / "results.csv") as fh:
        fh.write("configuration," + csv_text({}).splitlines()[0] + "\n")
        for label, summary in rows.items():
            for line in csv_text(summary).splitlines()[1:]:
                fh.write(f"{label},{line}\n")
    write_json(out / "results.json", {"generation": rows, "retrieval": retrieval_rows, "n_questions": len(items)})
    return {"table": table, "generation": rows, "retrieval": retrieval_rows, "out": str(out)}


def register(sub: argparse._SubParsersAction, output: argparse.ArgumentParser) -> None:
    x = sub.add_parser(
        "experiment", parents=[output], help="a grid of retrievers x generators x k x runs from a TOML file"
    )
    x.add_argument("--config", required=True, help="experiment TOML (see examples/dev-grid.toml)")
    x.add_argument("--out", help="override: results folder")
    x.add_argument("--runs", type=int, help="override: runs per configuration")
    x.add_argument("-k", help="override: comma-separated k values")
    x.add_argument("--dataset", help="override: dataset")
    x.add_argument("--metrics", help="override: comma-separated metrics")
    x.add_argument("--retrievers", help="only these retrievers (comma-separated names)")
    x.add_argument("--generators", help="only these generators (comma-separated names)")
    x.set_defaults(func=cmd_experiment)


def _split(value: str | None) -> list[str] | None:
    return [x.strip() for x in value.split(",") if x.strip()] if value else None


def cmd_experiment(args: argparse.Namespace) -> int:
    from .config import ConfigError, load_experiment

    try:
        cfg = load_experiment(
            args.config,
            {
                "out": args.out,
                "runs": args.runs,
                "k": [int(x) for x in _split(args.k) or []] if args.k else None,
                "dataset": args.dataset,
                "metrics": _split(args.metrics),
                "only_retrievers": _split(args.retrievers),
                "only_generators": _split(args.generators),
            },
        )
    except (ConfigError, ValueError) as exc:
        raise UsageError(str(exc)) from None
    judge_scorer = nli_scorer = None
    if "geval" in cfg.metrics:
        if not cfg.judge:
            raise UsageError('metrics include geval: set judge = "MODEL" (and judge_base_url) in the config')
        from .evaluation.cli import make_judge
        from .evaluation.geval import geval_scores

        judge = make_judge(cfg.judge, cfg.judge_base_url, 8, Path(cfg.out) / "judge-cache")
        judge_scorer = lambda pairs: geval_scores(judge, pairs)  # noqa: E731
    if "nli" in cfg.metrics:
        raise UsageError("nli in an experiment grid: run `wetqa eval generation --metrics nli` on the run folders")
    result = run_experiment(cfg, judge_scorer, nli_scorer)
    emit(args, result, lambda: result["table"] + f"\n(results in {result['out']})")
    return 0
