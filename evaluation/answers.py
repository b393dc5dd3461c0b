"""Score generated runs against the gold answers and gold articles.

Per question and run: ROUGE-L, METEOR, citation P/R/Hit at chunk and article
level, and (when asked) G-Eval and NLI citation scores. Scores are appended
to ``scores.jsonl`` as they are computed, so an interrupted evaluation
resumes without recomputing; aggregates are mean +- std over runs, x100.
"""

from __future__ import annotations

import csv
import io
import json
import statistics
from collections.abc import Sequence
from pathlib import Path

from pydantic import BaseModel, ConfigDict, StrictInt, StrictStr, ValidationError

from wetqa.console import progress_bar
from wetqa.corpus.build import read_chunks
from wetqa.corpus.dataset import QAItem, article_key, first_problem
from wetqa.corpus.records import Chunk
from wetqa.corpus.sources import law_id_of
from wetqa.io import OwnedFolder, atomic_file, own_folder, read_journal, recognised, write_owned_json

from .abstention import answered_only, at_coverages, plot_risk_coverage, risk_coverage, zeroed
from .metrics import DEFAULT_METRICS, metric, score_keys, table_columns
from .scoring import Scoring


class RunFileError(ValueError):
    pass


class _RunRecord(BaseModel):
    """The fields of a run line that evaluation reads, with the types it relies on."""

    model_config = ConfigDict(extra="allow")
    id: StrictStr | StrictInt
    answer: StrictStr | None
    cited_ids: list[StrictStr] | None = None
    error: StrictStr | None = None


def load_run(path: Path) -> tuple[list[dict], list[dict]]:
    """(records, problems): malformed or incomplete lines become problems, never a crash."""
    records, problems = [], []
    with open(path, encoding="utf-8-sig") as fh:  # a leading BOM skipped
        for lineno, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                rec = json.loads(line)
            except json.JSONDecodeError as exc:
                problems.append({"file": str(path), "line": lineno, "problem": f"not JSON ({exc.msg})"})
                continue
            try:
                _RunRecord.model_validate(rec)
            except ValidationError as exc:
                problems.append({"file": str(path), "line": lineno, "problem": first_problem(exc)})
                continue
            records.append(rec)
    # A question retried on resume has a later record: that one counts (the earlier one failed).
    latest = {str(r["id"]): r for r in records}
    return list(latest.values()), problems


def other_question(path: Path, rec: dict, item: QAItem) -> str | None:
    """The one-line problem when an answer answers another question under its id than the dataset asks (run
    with another dataset or an edited one), or None."""
    if item.asks(rec.get("question")):
        return None
    return (
        f"{path}: answers another question under id {item.id} than the dataset asks (the run was made with "
        "another or an edited dataset); score it with the dataset it answered"
    )


def asked_runs(folder: Path) -> list[Path]:
    """A run folder's run files: the runs its config.json says were asked (``generate --runs 2`` and then
    ``--runs 1`` leaves run-2.jsonl behind, no longer part of the folder's runs), or every run-*.jsonl."""
    files = sorted(folder.glob("run-*.jsonl"), key=lambda f: (len(f.name), f.name))
    try:
        runs = json.loads((folder / "config.json").read_text(encoding="utf-8")).get("runs")
    except (OSError, ValueError, AttributeError):
        runs = None
    if isinstance(runs, int) and not isinstance(runs, bool) and runs > 0:
        asked = {f"run-{i}.jsonl" for i in range(1, runs + 1)}
        files = [f for f in files if f.name in asked]
    return files


def find_run_files(paths: Sequence[str | Path]) -> list[Path]:
    files: list[Path] = []
    for p in map(Path, paths):
        if p.is_dir():
            files += asked_runs(p)
        elif p.is_file():
            files.append(p)
        else:
            raise RunFileError(f"run folder or file not found: {p}")
    if not files:
        raise RunFileError("no run-*.jsonl files in " + ", ".join(map(str, paths)))
    return files


class CorpusMap:
    """chunk id -> (law_id, article) and article key -> chunk ids, from a corpus or index chunks.jsonl."""

    def __init__(self, chunks: Sequence[Chunk]):
        self.chunk_article = {c.id: (c.law_id, c.article) for c in chunks}
        self.article_chunks: dict[str, list[str]] = {}
        for c in chunks:
            self.article_chunks.setdefault(article_key(c.law_id, c.article), []).append(c.id)
        self.texts = {c.id: c.text for c in chunks}

    @classmethod
    def from_folder(cls, folder: str | Path) -> CorpusMap:
        """From a corpus folder (``chunks.jsonl``) or an index folder (its store)."""
        from wetqa.retrieval.engines.store import STORE, ChunkStore

        folder = Path(folder)
        if (folder / "chunks.jsonl").is_file():
            return cls(read_chunks(folder / "chunks.jsonl"))
        if (folder / STORE).is_file():
            return cls(list(ChunkStore(folder / STORE)))
        raise RunFileError(f"no chunks.jsonl or {STORE} in {folder}: give a corpus or index folder")


def score_record(rec: dict, item: QAItem, corpus: CorpusMap, names: Sequence[str]) -> dict:
    """The local metrics of one answer (model metrics are batched by their scorers)."""
    out: dict = {}
    if rec.get("error"):
        out["generation_error"] = rec["error"]
    for name in names:
        m = metric(name)
        if m.compute is not None:
            out.update(m.compute(rec, item, corpus))
    return out


def read_score_rows(path: Path) -> list[dict]:
    """The rows of a ``scores.jsonl``, read only: a torn last line of an interrupted evaluation is skipped
    (the evaluation that owns the file cuts it off when it resumes; a reader leaves the file alone)."""
    rows = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return rows


def question_means(rows: Sequence[dict], keys: frozenset[str] | None = None) -> dict[str, dict[str, float]]:
    """Each score's mean per question id over the runs (rows of several runs of one configuration)."""
    keys = keys or score_keys()
    collected: dict[str, dict[str, list[float]]] = {}
    for r in rows:
        for key, value in r.items():
            if key in keys and isinstance(value, (int, float)) and not isinstance(value, bool):
                collected.setdefault(key, {}).setdefault(str(r.get("id")), []).append(float(value))
    return {k: {q: statistics.mean(v) for q, v in by_q.items()} for k, by_q in collected.items()}


def aggregate(scores: dict[str, list[dict]]) -> dict:
    """Per run means, then mean and std over runs, x100 (like the published tables), and the 95% interval
    over questions (percentile bootstrap of each question's mean over the runs)."""
    from .significance import bootstrap_ci

    per_run: dict[str, dict[str, float]] = {}
    names: list[str] = []
    for run, rows in scores.items():
        means = {}
        keys = score_keys()
        for key in sorted({k for r in rows for k in r if k in keys}):
            vals = [r[key] for r in rows if isinstance(r.get(key), (int, float))]
            if vals:
                means[key] = statistics.mean(vals)
        per_run[run] = means
        names += [k for k in means if k not in names]
    by_question = question_means([r for rows in scores.values() for r in rows])
    summary = {}
    for key in sorted(names):
        vals = [m[key] for m in per_run.values() if key in m]
        lo, hi = bootstrap_ci(list(by_question[key].values()))
        summary[key] = {
            "mean": round(100 * statistics.mean(vals), 2),
            "std": round(100 * statistics.stdev(vals), 2) if len(vals) > 1 else 0.0,
            "runs": len(vals),
            "ci95": [round(100 * lo, 2), round(100 * hi, 2)],
            "questions": len(by_question[key]),
        }
    return {"per_run": {r: {k: round(v, 4) for k, v in m.items()} for r, m in per_run.items()}, "summary": summary}


def markdown_table(
    rows: dict[str, dict],
    columns=None,
    answered: dict[str, str] | None = None,
    marks: dict[str, dict[str, str]] | None = None,
) -> str:
    """One row per configuration: ``{name: summary}``; cells ``mean ± std [95% CI]``, "-" when not measured.

    ``answered`` (``{name: "48/51"}``) adds a column with the answered questions of the total; a row
    with fewer is marked, so a mean over fewer questions is not read as a complete run. ``marks``
    (``{name: {key: "†"}}``) follow a cell's mean: significantly different from a baseline row.
    """
    columns = columns or table_columns()
    head = "| configuration | " + ("answered | " if answered else "") + " | ".join(c for c, _ in columns) + " |"
    sep = "|---|" + ("---|" if answered else "") + "---|" * len(columns)
    lines = [head, sep]
    for name, summary in rows.items():
        cells = []
        if answered:
            got = answered.get(name, "?")
            n, _, total = got.partition("/")
            cells.append(got if n == total else f"{got} (incomplete)")
        for _, key in columns:
            s = summary.get(key)
            if not s:
                cells.append("-")
                continue
            flag = (marks or {}).get(name, {}).get(key, "")
            ci = f" [{s['ci95'][0]:.1f}, {s['ci95'][1]:.1f}]" if s.get("ci95") else ""
            cells.append(f"{s['mean']:.1f}{flag} ± {s['std']:.1f}{ci}")
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def csv_text(summary: dict) -> str:
    buf = io.StringIO()
    w = csv.writer(buf)
    w.writerow(["metric", "mean_x100", "std_x100", "runs", "ci95_lo_x100", "ci95_hi_x100"])
    for k, v in summary.items():
        lo, hi = v.get("ci95") or ("", "")
        w.writerow([k, v["mean"], v["std"], v["runs"], lo, hi])
    return buf.getvalue()


# What `eval generation` writes into its folder (the judge's cache folder too).
EVAL_FILES = ("scores.jsonl", "metrics.json", "metrics.csv", "table.md", "risk_coverage.png", "cache")


def eval_folder(out: str | Path) -> OwnedFolder:
    """An evaluation folder under the owned-folder rule (one of an older wetqa is known by its metrics.json)."""
    return own_folder(out, EVAL_FILES, adopt=recognised("metrics.json", EVAL_FILES))


def evaluate_runs(
    run_paths: Sequence[str | Path],
    items: Sequence[QAItem],
    corpus: CorpusMap,
    out: str | Path,
    scoring: Scoring | Sequence[str] = DEFAULT_METRICS,
    progress: bool = True,
    extra_config: dict | None = None,
    force: bool = False,
) -> dict:
    """Score run files, resumably: ``scores.jsonl`` keeps each answer's scores with a hash of their inputs
    (the answer and its citations, the gold answer, the corpus mapping, the judge or NLI model of the
    ``scoring``'s settings). A cached score whose inputs changed is never reused: the evaluation is
    refused, naming what changed, or with ``force`` those scores are computed again."""
    out = Path(out)
    if not isinstance(scoring, Scoring):
        scoring = Scoring(scoring, folder=out / "cache")
    # Scored against the gold answer: a dataset without any (everyday questions with gold articles alone) gives
    # them nothing to compare with, and a 0 would read as a measured score.
    no_reference = (
        [n for n in REFERENCE_METRICS if n in scoring.metrics] if not any(it.answer.strip() for it in items) else []
    )
    if no_reference:
        if len(no_reference) == len(scoring.metrics):
            raise RunFileError(
                f"{', '.join(no_reference)}: the dataset has no gold answers to compare the answers with; "
                "give a dataset with answers, or other --metrics"
            )
        scoring = scoring.without(no_reference)
    eval_folder(out)  # refused before anything is written when it holds files wetqa did not write
    files = find_run_files(run_paths)
    book = _ScoreBook(out / "scores.jsonl", scoring, corpus, {it.id: it for it in items})
    for f in files:
        book.read_run(f, progress)
    book.refuse_stale(force, out)
    book.write_local()
    book.score_models()
    name = (extra_config or {}).get("name", "run")
    scores, left_out = complete_runs(book.scores)
    result = {
        **_summary(scores, len(items), scoring),
        "left_out_runs": left_out,
        "not_scored": {n: "the dataset has no gold answers" for n in no_reference},
        "runs": [str(f) for f in files],
        "n_questions": len(items),
        "problems": book.problems,
        "abstention": abstention_report(book.scores, out, name),
        "config": extra_config or {},
    }
    _write_results(out, result, name)
    return result


REFERENCE_METRICS = ("rouge", "meteor")  # the metrics that compare an answer with the gold answer


def complete_runs(scores: dict[str, list[dict]]) -> tuple[dict[str, list[dict]], list[dict]]:
    """The runs a mean over runs may take: those that answer every question some run answers. A run over
    fewer (interrupted, or made with ``--limit``) would move the mean by the questions it lacks, not by what
    it answered; it is left out and named ({run, answered, of}). When no run answers them all, all stay."""
    asked = {r["id"] for rows in scores.values() for r in rows}
    whole = {run for run, rows in scores.items() if {r["id"] for r in rows} == asked}
    if not whole or len(whole) == len(scores):
        return scores, []
    left = [{"run": run, "answered": len(rows), "of": len(asked)} for run, rows in scores.items() if run not in whole]
    return {run: rows for run, rows in scores.items() if run in whole}, left


class _ScoreBook:
    """The score rows of one evaluation: cached rows reused while their inputs match, the rest scored."""

    def __init__(self, path: Path, scoring: Scoring, corpus: CorpusMap, by_id: dict[str, QAItem]):
        self.path, self.scoring, self.corpus, self.by_id = path, scoring, corpus, by_id
        # A torn last line from an interrupted evaluation is cut off.
        self.cache = {(r["run"], r["id"]): r for r in read_journal(path)}
        self.scores: dict[str, list[dict]] = {}
        self.problems: list[dict] = []
        self.stale: dict[str, list[str]] = {}
        self.pending: list[dict] = []  # rows whose new local scores are written once nothing is stale
        self.todo: dict[str, list[tuple[dict, dict, QAItem]]] = {}  # model metric -> (row, record, item)

    def read_run(self, path: Path, progress: bool) -> None:
        run = path.parent.name + "/" + path.stem
        records, bad = load_run(path)
        self.problems += bad
        rows = self.scores.setdefault(run, [])
        for rec in progress_bar(records, desc=f"scoring {run}", unit="q", progress=progress, leave=False):
            item = self.by_id.get(str(rec["id"]))
            if item is None:
                self.problems.append(
                    {"file": str(path), "id": str(rec["id"]), "problem": "question id not in the dataset"}
                )
                continue
            problem = other_question(path, rec, item)
            if problem:
                raise RunFileError(problem)
            rows.append(self._row(run, rec, item))

    def _row(self, run: str, rec: dict, item: QAItem) -> dict:
        qid = str(rec["id"])
        row = dict(self.cache.get((run, qid), {})) or {"run": run, "id": qid}
        old = row.get("inputs", {})
        inputs = {m.name: self.scoring.input_hash(m, rec, item, self.corpus) for m in self.scoring.metrics.values()}
        for m in self.scoring.metrics.values():
            if m.has(row) and old.get(m.name) != inputs[m.name]:
                self.stale.setdefault(m.name, []).append(f"{run}:{qid}")
                m.drop(row)
        row["inputs"] = {**old, **inputs}
        # Not scores, read fresh each time: whether the answer abstained, its confidence, and whether
        # the first retrieved article (what an answer rests on) is a gold one.
        first = (rec.get("retrieved") or [{}])[0]
        row["abstained"] = bool(rec.get("abstained"))
        row["confidence"] = rec.get("confidence")
        row["first_right"] = article_key(law_id_of(first), first.get("article", "")) in item.gold_keys
        missing = [m.name for m in self.scoring.local() if not m.has(row)]
        if missing:
            row.update(score_record(rec, item, self.corpus, missing))
            self.pending.append(row)
        if not (rec.get("error") or rec.get("abstained")):  # an abstention is not judged: it scores 0
            for m in self.scoring.models():
                if not m.has(row):
                    self.todo.setdefault(m.name, []).append((row, rec, item))
        self.cache[(run, qid)] = row
        return row

    def refuse_stale(self, force: bool, out: Path) -> None:
        if self.stale and not force:
            listing = "; ".join(f"{m} of {len(ids)} answer(s), e.g. {ids[0]}" for m, ids in sorted(self.stale.items()))
            raise RunFileError(
                f"scores in {out} were computed from other inputs ({listing}: the run, the gold data, the corpus "
                "or the judge/NLI model changed); give another --out, or --force to score them again"
            )

    def write_local(self) -> None:
        """The rows with new local scores, written once nothing stale stands in the way."""
        self._write(self.pending)

    def score_models(self) -> None:
        for name, todo in self.todo.items():
            results = self.scoring.scorers[name]([(rec, item) for _, rec, item in todo], self.corpus)
            m = metric(name)
            for (row, _, _), res in zip(todo, results):
                m.drop(row)  # an earlier attempt's partial scores and error give way to this one
                row.update(res)
            self._write([row for row, _, _ in todo])

    def _write(self, rows: list[dict]) -> None:
        with open(self.path, "a", encoding="utf-8") as fh:
            for row in rows:
                fh.write(json.dumps(row, ensure_ascii=False) + "\n")
                fh.flush()


def _summary(scores: dict[str, list[dict]], n_items: int, scoring: Scoring) -> dict:
    """Over all questions (an abstention scores 0: the published tables' footing) and over answered ones,
    with each run's coverage (questions with an answer) and the answers without a complete score."""
    keys = score_keys()
    agg = aggregate({run: zeroed(rows, keys) for run, rows in scores.items()})
    agg_answered = aggregate({run: answered_only(rows) for run, rows in scores.items()})
    answered = {run: sum(1 for r in rows if not r.get("generation_error")) for run, rows in scores.items()}
    failed = [f"{r['run']}:{r['id']}" for rows in scores.values() for r in rows if _incomplete(r, scoring)]
    return {
        "answered": {"per_run": answered, "total": n_items, "min": f"{min(answered.values(), default=0)}/{n_items}"},
        "failed": {"count": len(failed), "examples": failed[:5]},
        "scored": sum(len(rows) for rows in scores.values()) - len(failed),  # answers with every score
        "metrics": list(scoring.names),
        **scoring.notes(),
        **agg,
        "summary_answered": agg_answered["summary"],
    }


def _incomplete(row: dict, scoring: Scoring) -> bool:
    return bool(row.get("generation_error")) or (
        not row.get("abstained") and any(not m.has(row) for m in scoring.metrics.values())
    )


def _write_results(out: Path, result: dict, name: str) -> None:
    write_owned_json(out / "metrics.json", result, "metrics/1")
    with atomic_file(out / "metrics.csv") as fh:
        fh.write(csv_text(result["summary"]))
    with atomic_file(out / "table.md") as fh:
        fh.write(markdown_table({name: result["summary"]}, answered={name: result["answered"]["min"]}))


def abstention_report(scores: dict[str, list[dict]], out: Path, name: str) -> dict:
    """Abstention rate per run, and the risk-coverage curve (table and PNG) of the runs' confidence."""
    rows = [r for run_rows in scores.values() for r in run_rows if not r.get("generation_error")]
    rates = {run: sum(bool(r.get("abstained")) for r in rr) / len(rr) for run, rr in scores.items() if rr}
    report: dict = {
        "rate": round(statistics.mean(rates.values()), 4) if rates else 0.0,
        "per_run": {run: round(v, 4) for run, v in rates.items()},
        "abstained": sum(bool(r.get("abstained")) for r in rows),
    }
    scored = [r for r in rows if isinstance(r.get("confidence"), (int, float))]
    if scored:
        correct = [bool(r.get("first_right")) if r.get("abstained") else bool(r.get("article_hit")) for r in scored]
        points = risk_coverage([r["confidence"] for r in scored], correct)
        report["risk_coverage"] = at_coverages(points)
        png = plot_risk_coverage(points, out / "risk_coverage.png", f"{name}: risk against coverage")
        report["risk_coverage_png"] = str(png) if png else None
    return report
