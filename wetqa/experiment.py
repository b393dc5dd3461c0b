"""A grid of retrievers x generators x k x runs, from one config, ending in the published table shape.

Indexes, runs and scores live under the output folder and are reused: a
re-run after an interruption builds nothing twice, generates only missing
answers and scores only missing ones.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

from wetqa.config import ConfigError, ExperimentConfig, GeneratorSpec
from wetqa.console import UsageError, emit, progress_bar
from wetqa.corpus import BuildOptions, ChunkingOptions, build_corpus
from wetqa.corpus.build import MANIFEST
from wetqa.corpus.dataset import QAItem, load_dataset
from wetqa.evaluation.abstention import zeroed
from wetqa.evaluation.answers import CorpusMap, csv_text, evaluate_runs, markdown_table, question_means, read_score_rows
from wetqa.evaluation.metrics import score_keys
from wetqa.evaluation.ranking import evaluate_retrieval
from wetqa.evaluation.scoring import Scoring
from wetqa.evaluation.significance import DEFAULT_CORRECTION, LEGEND, correct, mark, randomization_p
from wetqa.generation import GenerationError, PipelineSpec, make_backend
from wetqa.generation.runs import check_run_folder, generate_runs
from wetqa.io import OwnedFolder, atomic_file, own_folder, recognised, write_owned_json
from wetqa.retrieval import RetrievalSpec, build_index, chunks_of


def _source_digests(src: Path) -> dict[str, str]:
    """File name -> sha256 of the law files a build would read (those that failed to parse count too)."""
    import hashlib

    from wetqa.corpus.build import collect_sources, display_name

    # Names that are not UTF-8 are reported by the build, not read: leave them out here too.
    return {
        p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in collect_sources([src]) if display_name(p) == p.name
    }


def _corpus_dir(cfg: ExperimentConfig, out: Path, force: bool = False) -> Path:
    src = Path(cfg.corpus)
    if (src / MANIFEST).is_file():
        return src
    target = out / "corpus"
    opts = BuildOptions(chunking=ChunkingOptions(cfg.chunking, 150 if cfg.chunking == "words150" else 200))
    if (target / MANIFEST).is_file():
        built = json.loads((target / MANIFEST).read_text(encoding="utf-8"))
        changed = []
        if built.get("options") != opts.to_json():
            changed.append("chunking/build options")
        if _source_digests(src) != built.get("source_sha256"):
            changed.append("source files")
        if not changed:
            return target
        if not force:
            raise ConfigError(
                f"{target} was built with other {' and '.join(changed)} than the config asks for; "
                "--force rebuilds it (and then the indexes and runs made from it)"
            )
    build_corpus([src], target, opts)
    return target


# What an experiment writes into its folder: its files, and the folders of what it builds and runs.
EXPERIMENT_FILES = (
    "config.json",
    "table.md",
    "results.csv",
    "results.json",
    "corpus",
    "indexes",
    "runs",
    "judge-cache",
)


def experiment_folder(out: str | Path) -> OwnedFolder:
    """The experiment's folder under the owned-folder rule (an older wetqa's is known by its config.json)."""
    return own_folder(out, EXPERIMENT_FILES, adopt=recognised("config.json", EXPERIMENT_FILES))


def run_experiment(cfg: ExperimentConfig, scoring: Scoring | None = None, force: bool = False) -> dict:
    scoring = scoring or cfg.scoring()  # a missing judge or model path is named before anything runs
    out = experiment_folder(cfg.out).path  # the judge's cache (judge-cache) is made in it when first written
    write_owned_json(out / "config.json", cfg.to_json(), "experiment/1")
    items = load_dataset(cfg.dataset)
    corpus = _corpus_dir(cfg, out, force)
    retrievers, specs = _open_retrievers(cfg, out, corpus)
    chunk_map = CorpusMap(chunks_of(next(iter(retrievers.values()))))
    retrieval_rows = {}
    # Questions without gold articles (a law-level gold) are left out of the retrieval rows, as trec_eval leaves
    # out a question without judgements: each would count as a miss in every mean. Their answers are scored.
    graded = [i for i in items if i.gold_keys]
    for name, r in retrievers.items():
        hits = r.batch_search([i.question for i in graded], 10, threads=2)
        rows_of = evaluate_retrieval(graded, {i.id: h for i, h in zip(graded, hits)}, chunks_of(r))
        retrieval_rows[name] = {**rows_of, "n_without_gold": len(items) - len(graded)}

    rows = _Rows()
    # The bar is closed however the grid ends (a refused run folder, an interrupt).
    with progress_bar(total=len(cfg.retrievers) * len(cfg.generators) * len(cfg.k), desc="grid", unit="config") as bar:
        # Generators outermost: one engine per generator spec serves every retriever, k and run, and is
        # shut down before the next generator's engine starts (two vLLM engines do not fit one GPU).
        for gspec in cfg.generators:
            cells = _cells(cfg, gspec, specs, out, force, items)
            backend = make_backend(cells[0][1].generator)
            try:
                for rspec, spec, run_dir in cells:
                    _generate(
                        spec,
                        spec.build(retrievers[rspec.name], backend),
                        rspec.name,
                        gspec.name,
                        run_dir,
                        items,
                        cfg.runs,
                        force,
                    )
                    label = f"{rspec.name}+{gspec.name}@k{spec.k}"
                    result = evaluate_runs(
                        [run_dir], items, chunk_map, run_dir / "eval", scoring, False, {"name": label}, force
                    )
                    rows.add(label, result, run_dir / "eval" / "scores.jsonl")
                    bar.update()
            finally:
                backend.close()
                del backend
    table = _write_tables(cfg, out, len(items), rows, retrieval_rows)
    return {"table": table, "generation": rows.summary, "retrieval": retrieval_rows, "out": str(out)}


def _cells(
    cfg: ExperimentConfig,
    gspec: GeneratorSpec,
    specs: dict[str, RetrievalSpec],
    out: Path,
    force: bool,
    items: Sequence[QAItem],
) -> list:
    """(retriever spec, pipeline spec, run folder) of one generator's cells, each refused before an engine
    is started for nothing when its folder holds runs of other inputs."""
    cells = []
    for rspec in cfg.retrievers:
        for k in cfg.k:
            spec = _cell_spec(specs[rspec.name], gspec, k, cfg.language)
            run_dir = out / "runs" / f"{rspec.name}__{gspec.name}__k{k}"
            check_run_folder(run_dir, spec.inputs(), force, items)
            cells.append((rspec, spec, run_dir))
    return cells


def _generate(
    spec: PipelineSpec, pipeline, retriever: str, generator: str, run_dir: Path, items, runs: int, force: bool
) -> None:
    config = {
        "retriever": retriever,
        "generator": generator,
        "generator_config": spec.generator.to_json(),
        "spec": spec.to_json(),
        "spec_hash": spec.digest(),
    }
    generate_runs(pipeline, items, run_dir, runs=runs, progress=False, config=config, inputs=spec.inputs(), force=force)


@dataclass
class _Rows:
    """The grid's table rows as they are scored: summaries, answered counts and per-question scores."""

    summary: dict[str, dict] = field(default_factory=dict)
    answered: dict[str, str] = field(default_factory=dict)
    per_question: dict[str, dict[str, dict[str, float]]] = field(default_factory=dict)

    def add(self, label: str, result: dict, scores: Path) -> None:
        self.summary[label] = result["summary"]
        self.answered[label] = result["answered"]["min"]
        self.per_question[label] = _question_scores(scores)


def _write_tables(cfg: ExperimentConfig, out: Path, n_items: int, rows: _Rows, retrieval_rows: dict) -> str:
    """table.md (with the significance marks against the baseline row), results.csv and results.json."""
    baseline = cfg.baseline_label()
    tests = significance_marks(rows.per_question, baseline) if baseline else {}
    marks = {row: {k: t["mark"] for k, t in cells.items()} for row, cells in tests.items()}
    table = markdown_table(rows.summary, answered=rows.answered, marks=marks)
    correction = DEFAULT_CORRECTION.capitalize()
    legend = f"Baseline: {baseline}; " + LEGEND.format(correction=correction) + ".\n" if baseline else ""
    with atomic_file(out / "table.md") as fh:
        fh.write(
            f"# {cfg.name}: {n_items} questions, {cfg.runs} run(s), mean ± std over runs x100 "
            f"[95% interval over questions]\n\n{table}\n"
            "R, P, Hit: citations at article level. " + legend
        )
    with atomic_file(out / "results.csv") as fh:
        fh.write("configuration," + csv_text({}).splitlines()[0] + "\n")
        for label, summary in rows.summary.items():
            for line in csv_text(summary).splitlines()[1:]:
                fh.write(f"{label},{line}\n")
    results = {"generation": rows.summary, "retrieval": retrieval_rows, "n_questions": n_items}
    write_owned_json(out / "results.json", {**results, "baseline": baseline, "significance": tests}, "results/1")
    return table


def _question_scores(path: Path) -> dict[str, dict[str, float]]:
    """Each metric's score per question (mean over runs; an abstention scores 0) from an eval's scores.jsonl."""
    return question_means(zeroed(read_score_rows(path), score_keys()))


def significance_marks(per_question: dict[str, dict[str, dict[str, float]]], baseline: str) -> dict[str, dict]:
    """Per row (not the baseline) and metric: the Holm-corrected p of the paired randomization test and its mark."""
    out: dict[str, dict] = {row: {} for row in per_question if row != baseline}
    base = per_question[baseline]
    for key in base:
        others = [row for row in out if key in per_question[row]]
        raw = []
        for row in others:
            common = [q for q in base[key] if q in per_question[row][key]]
            raw.append(
                randomization_p([base[key][q] for q in common], [per_question[row][key][q] for q in common])
                if common
                else 1.0
            )
        for row, p in zip(others, correct(raw, DEFAULT_CORRECTION)):
            out[row][key] = {"p": round(p, 5), "mark": mark(p)}
    return out


def _open_retrievers(cfg: ExperimentConfig, out: Path, corpus: Path) -> tuple[dict, dict[str, RetrievalSpec]]:
    """Each retriever of the grid as its retrieval spec (indexes built when missing) and its pipeline,
    assembled as every command assembles one (:meth:`RetrievalSpec.build`)."""
    specs: dict[str, RetrievalSpec] = {}
    for spec in progress_bar([r for r in cfg.retrievers if not r.components], desc="indexes", unit="index"):
        idx = out / "indexes" / spec.name
        rescore = {"model": spec.rescore} if spec.rescore else None
        build_index(corpus, spec.retriever, idx, spec.options or None, progress=False, rescore=rescore)
        specs[spec.name] = RetrievalSpec(index=(str(idx),))
    for spec in cfg.retrievers:
        if spec.components:
            index = tuple(x for c in spec.components for x in specs[c].index)
            specs[spec.name] = RetrievalSpec(
                index=index, fusion=spec.fusion, weights=tuple(spec.weights) if spec.weights else None
            )
    for spec in cfg.retrievers:
        if spec.rerank:
            reranked = replace(specs[spec.name], rerank=(spec.rerank,))
            if spec.rerank_top is not None:  # otherwise the retrieval spec's own default
                reranked = replace(reranked, rerank_top=spec.rerank_top)
            specs[spec.name] = reranked
    retrievers: dict = {}
    for name, s in specs.items():
        try:
            retrievers[name] = s.validate().build()
        except ValueError as exc:
            raise ConfigError(f"[retrievers.{name}] {exc}") from None
    return retrievers, specs


def _cell_spec(retrieval: RetrievalSpec, gspec: GeneratorSpec, k: int, language: str) -> PipelineSpec:
    """One cell of the grid as a pipeline spec: the same record `wetqa generate` runs."""
    try:
        spec = PipelineSpec.from_values({"generator": gspec.generator, **gspec.table}, f"[generators.{gspec.name}]")
    except GenerationError as exc:
        raise ConfigError(str(exc)) from None
    return replace(spec, retrieval=retrieval).with_options(k=k, language=language)


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
    x.add_argument("--language", choices=("nl", "en"), help="override: prompt language")
    x.add_argument(
        "--force",
        action="store_true",
        help="start again the runs and scores made with other inputs (and rebuild a corpus built from other files)",
    )
    x.set_defaults(func=cmd_experiment)


def _split(value: str | None) -> list[str] | None:
    return [x.strip() for x in value.split(",") if x.strip()] if value else None


def _ks(value: str | None) -> list[int] | None:
    if not value:
        return None
    try:
        return [int(x) for x in _split(value) or []]
    except ValueError:
        raise UsageError(f"-k {value}: whole numbers separated by commas (e.g. -k 1,3,5)") from None


def cmd_experiment(args: argparse.Namespace) -> int:
    from wetqa.config import ConfigError, load_experiment

    try:
        cfg = load_experiment(
            args.config,
            {
                "out": args.out,
                "runs": args.runs,
                "k": _ks(args.k),
                "dataset": args.dataset,
                "metrics": _split(args.metrics),
                "only_retrievers": _split(args.retrievers),
                "only_generators": _split(args.generators),
                "language": args.language,
            },
        )
        scoring = cfg.scoring()  # a missing judge or model path is named before the grid runs
    except (ConfigError, ValueError) as exc:
        raise UsageError(str(exc)) from None
    result = run_experiment(cfg, scoring, force=args.force)
    emit(args, result, lambda: result["table"] + f"\n(results in {result['out']})")
    return 0
