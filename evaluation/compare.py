"""`wetqa eval compare`: systems compared question by question against a baseline.

Each system is a folder: the answers of `wetqa generate` (run-*.jsonl: ROUGE-L, METEOR and citations are
scored here), the output of `wetqa eval generation` (scores.jsonl: any metric it scored, G-Eval and NLI
included), or the output of `wetqa eval retrieval` (TREC runs: R@k, Hit@k, MRR, nDCG@k through ranx).
Several runs of one system are averaged per question first; an abstained answer scores 0 (the footing
of the "over all" tables). Systems are compared on the questions they all answered.

Per metric and system: the mean, the paired difference to the baseline with its 95% bootstrap interval,
and the p-value of the paired randomization test, corrected over the systems (Holm by default). Answer
metrics are tested with scipy (:mod:`.significance`), rankings with ranx's ``compare`` (Fisher's
randomization test); the output says which.
"""

from __future__ import annotations

import csv
import io
import json
import math
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from wetqa.console import install_command
from wetqa.corpus.dataset import QAItem

from .answers import CorpusMap, find_run_files, load_run, other_question, question_means, score_record
from .metrics import metric, metrics
from .significance import DEFAULT_CORRECTION, LEGEND, RESAMPLES, SEED, bootstrap_ci, correct, mark, randomization_p

# Answer metrics by default (the published row) and retrieval metrics by default (ir_measures names).
ANSWER_DEFAULT = ("rougeL", "meteor", "article_recall", "article_precision", "article_hit")
RETRIEVAL_DEFAULT = ("Hit@1", "Hit@3", "R@10", "MRR", "nDCG@10")
# ir_measures-style names -> ranx's.
_RANX = {"R": "recall", "Hit": "hit_rate", "P": "precision", "nDCG": "ndcg", "MRR": "mrr", "MAP": "map"}


class CompareError(ValueError):
    """Bad input to a comparison: one line, exit 2."""


@dataclass
class System:
    name: str
    path: Path
    kind: str  # answers | scores | retrieval
    scores: dict[str, dict[str, float]] = field(default_factory=dict)  # metric -> question id -> score
    failed: list[str] = field(default_factory=list)  # question ids with a failed answer in some run
    runs: int = 1
    trec: Path | None = None
    problems: list[str] = field(default_factory=list)  # lines that are no records, scores that are no numbers


def kind_of(path: Path) -> str:
    if not path.is_dir():
        raise CompareError(f"not a folder: {path} (give run folders of `wetqa generate` or `wetqa eval ...`)")
    if (path / "scores.jsonl").is_file():
        return "scores"
    if any(path.glob("run-*.jsonl")):
        return "answers"
    if (path / "run.article.trec").is_file() or (path / "run.chunk.trec").is_file():
        return "retrieval"
    raise CompareError(
        f"{path}: no run-*.jsonl (generate), scores.jsonl (eval generation) or run.*.trec (eval retrieval)"
    )


def _groups(keys: Sequence[str]) -> list[str]:
    """The registered metrics that write these score keys (rouge writes rougeL, citations article_hit...)."""
    out = []
    for key in keys:
        owner = next((name for name, m in metrics().items() if key in m.scores), None)
        if owner is None:
            known = sorted(k for m in metrics().values() for k in m.scores)
            raise CompareError(f"unknown answer metric {key!r}; choose from {', '.join(known)}")
        if owner not in out:
            out.append(owner)
    return out


def load_answers(path: Path, items: dict[str, QAItem], corpus: CorpusMap, keys: Sequence[str]) -> System:
    """A `generate` folder, its local metrics scored here; failed answers counted and left out."""
    groups = _groups(keys)
    for g in groups:
        if metric(g).cost != "local":
            raise CompareError(
                f"metric {g!r} is scored by a model: run `wetqa eval generation --metrics {g}` on {path} "
                "and compare its output folder"
            )
    files = find_run_files([path])
    rows: list[dict] = []
    failed: set[str] = set()
    problems: list[str] = []
    for f in files:
        records, bad = load_run(f)
        problems += [f"{f.name}:{b['line']}: {b['problem']}" for b in bad]
        for rec in records:
            qid = str(rec["id"])
            if qid not in items:
                continue
            problem = other_question(f, rec, items[qid])
            if problem:
                raise CompareError(problem)
            if rec.get("error"):
                failed.add(qid)
                continue
            row = score_record(rec, items[qid], corpus, groups)
            # A score of None (ROUGE-L of a question without a gold answer) is no score: left out, not a 0.
            scored = [k for k in keys if row.get(k, 0.0) is not None]
            rows.append({"id": qid, **{k: 0.0 if rec.get("abstained") else float(row.get(k, 0.0)) for k in scored}})
    scores = _per_question(rows, keys, failed)
    return System(path.name, path, "answers", scores, sorted(failed), len(files), problems=problems)


def _per_question(rows: list[dict], keys: Sequence[str], failed: set[str]) -> dict[str, dict[str, float]]:
    """Each metric's mean per question over the runs, the questions failed in some run left out."""
    means = question_means([r for r in rows if str(r.get("id")) not in failed], frozenset(keys))
    return {k: means.get(k, {}) for k in keys}


def load_scores(path: Path, items: dict[str, QAItem], keys: Sequence[str]) -> System:
    """An `eval generation` folder: its scores.jsonl as scored (a metric it lacks is refused)."""
    rows, problems = _score_lines(path / "scores.jsonl")
    present = {k for r in rows for k in r}
    missing = [k for k in keys if k not in present]
    if missing:
        raise CompareError(
            f"metric {', '.join(missing)} missing from {path} (it has: "
            f"{', '.join(sorted(present & {k for m in metrics().values() for k in m.scores})) or 'none'})"
        )
    kept: list[dict] = []
    failed: set[str] = set()
    for r in rows:
        qid = str(r.get("id"))
        if qid not in items:
            continue
        if r.get("generation_error"):
            failed.add(qid)
            continue
        odd = [k for k in keys if k in r and not _finite(r[k])]
        if odd and not r.get("abstained"):
            problems.append(f"question {qid}: {odd[0]} {r[odd[0]]!r} is not a finite score; left out")
            failed.add(qid)
            continue
        kept.append({**r, **dict.fromkeys(keys, 0.0)} if r.get("abstained") else r)  # an abstention scores 0
    runs = len({r.get("run") for r in rows}) or 1
    kept = [r for r in kept if str(r.get("id")) not in failed]
    return System(path.name, path, "scores", _per_question(kept, keys, set()), sorted(failed), runs, problems=problems)


def _finite(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _score_lines(path: Path) -> tuple[list[dict], list[str]]:
    """A scores.jsonl's rows, and its lines that are no records (a torn last line, an interrupted
    evaluation's, is left out without a word: the evaluation that owns the file cuts it off)."""
    text = path.read_text(encoding="utf-8")
    lines = text.split("\n")
    rows, problems = [], []
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except ValueError:
            row = None
        if isinstance(row, dict):
            rows.append(row)
        elif n < len(lines):  # the last piece has no newline after it: torn, not garbage
            problems.append(f"{path.name}:{n}: not a record; left out")
    return rows, problems


def ranx_name(name: str) -> str:
    """``R@10`` -> ``recall@10``, ``MRR`` -> ``mrr`` (ranx's names); refused when unknown."""
    base, _, k = name.partition("@")
    if base not in _RANX:
        raise CompareError(f"unknown retrieval metric {name!r}; use R@k, P@k, Hit@k, nDCG@k, MRR or MAP")
    return _RANX[base] + (f"@{k}" if k else "")


def _read_trec(path: Path, problems: list[str]) -> dict[str, dict[str, float]]:
    """A TREC run; a line that is not ``query Q0 doc rank score tag`` with a finite score is named in ``problems``."""
    run: dict[str, dict[str, float]] = {}
    for n, line in enumerate(path.read_text(encoding="utf-8-sig").splitlines(), 1):  # a leading BOM skipped
        if not line.strip():
            continue
        parts = line.split()
        try:
            score = float(parts[4]) if len(parts) == 6 else None
        except ValueError:
            score = None
        if score is None or not math.isfinite(score):
            problems.append(f"{path.name}:{n}: not a TREC run line with a finite score; left out")
            continue
        run.setdefault(parts[0], {})[parts[2]] = score
    return run


def _read_qrels(path: Path) -> dict[str, dict[str, int]]:
    qrels: dict[str, dict[str, int]] = {}
    for line in path.read_text(encoding="utf-8-sig").splitlines():
        parts = line.split()
        if len(parts) == 4:
            qrels.setdefault(parts[0], {})[parts[2]] = int(parts[3])
    return qrels


def load_retrieval(path: Path, level: str) -> System:
    trec = path / f"run.{level}.trec"
    if not trec.is_file():
        raise CompareError(f"{path}: no run.{level}.trec (written by `wetqa eval retrieval`)")
    return System(path.name, path, "retrieval", trec=trec)


def _unique_names(systems: list[System]) -> None:
    """Folder names, made unique by their parents where two are alike (runs/a/eval, runs/b/eval)."""
    seen: dict[str, int] = {}
    for s in systems:
        seen[s.name] = seen.get(s.name, 0) + 1
    for s in systems:
        if seen[s.name] > 1:
            s.name = "/".join(s.path.resolve().parts[-2:])


@dataclass
class Comparison:
    n: int
    baseline: str
    correction: str
    engine: str
    metrics: dict[str, dict[str, dict]]
    questions: list[str]
    per_question: dict[str, dict[str, list[float]]]  # metric -> system -> scores in ``questions`` order
    warnings: list[str]
    failed: dict[str, list[str]]

    def to_json(self) -> dict:
        return {
            "n": self.n,
            "baseline": self.baseline,
            "correction": self.correction,
            "engine": self.engine,
            "resamples": RESAMPLES,
            "metrics": self.metrics,
            "warnings": self.warnings,
            "failed": {s: {"count": len(q), "ids": q} for s, q in self.failed.items() if q},
        }


def _name_problems(systems: list[System], notes: list[str]) -> None:
    for s in systems:
        if s.problems:
            more = f" and {len(s.problems) - 3} more" if len(s.problems) > 3 else ""
            notes.append(f"{s.name}: {len(s.problems)} problem(s): {'; '.join(s.problems[:3])}{more}")


def _intersect(systems: list[System], keys: Sequence[str], items: dict[str, QAItem], notes: list[str]) -> list[str]:
    _name_problems(systems, notes)
    for s in systems:
        if s.failed:
            notes.append(f"{s.name}: {len(s.failed)} failed answer(s) left out ({', '.join(s.failed[:5])})")
    per_system = {s.name: set.intersection(*(set(s.scores[k]) for k in keys)) for s in systems}
    common = set(items).intersection(*per_system.values())
    if not common:
        sizes = ", ".join(f"{n}: {len(q)}" for n, q in per_system.items())
        raise CompareError(f"the runs have no question in common with each other and the dataset ({sizes})")
    if any(len(q) != len(common) for q in per_system.values()):
        sizes = ", ".join(f"{n}: {len(q)}" for n, q in per_system.items())
        notes.append(f"the runs cover different questions ({sizes}): compared on the {len(common)} they share")
    order = {q: i for i, q in enumerate(items)}
    return sorted(common, key=lambda q: order[q])


def _test(
    names: list[str], baseline: str, per_metric: dict[str, dict[str, np.ndarray]], p_values, correction: str, seed: int
) -> dict[str, dict[str, dict]]:
    out: dict[str, dict[str, dict]] = {}
    for m, by_system in per_metric.items():
        base = by_system[baseline]
        others = [s for s in names if s != baseline]
        raw = [p_values(m, s) for s in others]
        adjusted = dict(zip(others, correct(raw, correction)))
        out[m] = {}
        for s in names:
            scores = by_system[s]
            diff = scores - base
            if s == baseline:
                out[m][s] = {"mean": float(scores.mean()), "diff": 0.0, "ci95": [0.0, 0.0], "p": 1.0}
                continue
            lo, hi = bootstrap_ci(diff, seed=seed)
            out[m][s] = {
                "mean": float(scores.mean()),
                "diff": float(diff.mean()),
                "ci95": [lo, hi],
                "p": adjusted[s],
            }
    return out


def compare(
    paths: Sequence[str | Path],
    items: Sequence[QAItem],
    corpus_for=None,
    keys: Sequence[str] | None = None,
    baseline: str | None = None,
    correction: str = DEFAULT_CORRECTION,
    level: str = "article",
    seed: int = SEED,
) -> Comparison:
    """Compare the systems in ``paths``; ``corpus_for(path)`` gives a generate folder's chunk map."""
    if len(paths) < 2:
        raise CompareError("compare needs two or more run folders")
    by_id = {i.id: i for i in items}
    folders = [Path(p) for p in paths]
    kinds = {kind_of(p) for p in folders}
    if "retrieval" in kinds and len(kinds) > 1:
        raise CompareError("cannot compare retrieval runs (TREC) with answer runs: give one kind")
    notes: list[str] = []
    if "retrieval" in kinds:
        systems = [load_retrieval(p, level) for p in folders]
        keys = list(keys or RETRIEVAL_DEFAULT)
        for k in keys:
            ranx_name(k)
    else:
        keys = list(keys or ANSWER_DEFAULT)
        systems = []
        for p in folders:
            if kind_of(p) == "scores":
                systems.append(load_scores(p, by_id, keys))
            else:
                if corpus_for is None:
                    raise CompareError(f"{p}: scoring answers needs the corpus (--corpus DIR)")
                systems.append(load_answers(p, by_id, corpus_for(p), keys))
    _unique_names(systems)
    names = [s.name for s in systems]
    if len(set(names)) != len(names):
        raise CompareError(f"two systems have the same name: {', '.join(names)}")
    base = _pick_baseline(systems, baseline)
    if systems[0].kind == "retrieval":
        return _compare_rankings(systems, items, keys, base, correction, level, seed, notes)
    # A metric no question has a score of (ROUGE-L and METEOR over a dataset without gold answers) is left out,
    # said in a note; the others are compared over their questions.
    unscored = [k for k in keys if not any(s.scores.get(k) for s in systems)]
    if unscored and len(unscored) < len(keys):
        notes.append(f"{', '.join(unscored)}: no question has a score (no gold answers); left out")
        keys = [k for k in keys if k not in unscored]
    questions = _intersect(systems, keys, by_id, notes)
    per_metric = {k: {s.name: np.asarray([s.scores[k][q] for q in questions]) for s in systems} for k in keys}

    def p_values(m: str, s: str) -> float:
        return randomization_p(per_metric[m][base], per_metric[m][s], seed=seed)

    table = _test(names, base, per_metric, p_values, correction, seed)
    return Comparison(
        len(questions),
        base,
        correction,
        "scipy: paired bootstrap (percentile) and paired randomization test (permutation_test)",
        table,
        questions,
        {m: {s: v.tolist() for s, v in by.items()} for m, by in per_metric.items()},
        notes,
        {s.name: s.failed for s in systems},
    )


def _pick_baseline(systems: list[System], baseline: str | None) -> str:
    if baseline is None:
        return systems[0].name
    for s in systems:
        if baseline in (s.name, str(s.path)) or Path(baseline).resolve() == s.path.resolve():
            return s.name
    raise CompareError(f"--baseline {baseline!r} is none of the systems ({', '.join(s.name for s in systems)})")


def _compare_rankings(systems, items, keys, base, correction, level, seed, notes) -> Comparison:
    try:
        from ranx import Qrels, Run, evaluate
        from ranx import compare as ranx_compare
    except ImportError:
        raise CompareError(f"comparing retrieval runs needs ranx: {install_command('ranx')}") from None
    if level == "article":
        qrels_dict = {i.id: {k.replace(" ", "_"): 1 for k in i.gold_keys} for i in items}
    else:
        qrels_path = next((s.path / "qrels.chunk.txt" for s in systems if (s.path / "qrels.chunk.txt").is_file()), None)
        if qrels_path is None:
            raise CompareError(
                "chunk-level comparison needs qrels.chunk.txt beside the runs (eval retrieval writes it)"
            )
        qrels_dict = _read_qrels(qrels_path)
    runs = {s.name: _read_trec(s.trec, s.problems) for s in systems}
    _name_problems(systems, notes)
    per_system = {n: set(r) for n, r in runs.items()}
    common = set(qrels_dict).intersection(*per_system.values())
    if not common:
        raise CompareError("the retrieval runs have no question in common with each other and the dataset")
    if any(len(q & set(qrels_dict)) != len(common) for q in per_system.values()):
        sizes = ", ".join(f"{n}: {len(q & set(qrels_dict))}" for n, q in per_system.items())
        notes.append(f"the runs cover different questions ({sizes}): compared on the {len(common)} they share")
    order = {i.id: n for n, i in enumerate(items)}
    questions = sorted(common, key=lambda q: order.get(q, len(order)))
    qrels = Qrels({q: qrels_dict[q] for q in questions})
    ranx_runs = [Run({q: runs[n][q] for q in questions}, name=n) for n in runs]
    names = [r.name for r in ranx_runs]
    measures = [ranx_name(k) for k in keys]
    with warnings.catch_warnings():
        # numba's compile-time notes on ranx's first call are not the user's concern.
        warnings.simplefilter("ignore")
        report = ranx_compare(
            qrels, ranx_runs, measures, stat_test="fisher", n_permutations=RESAMPLES, random_seed=seed
        )
        per_run = {run.name: evaluate(qrels, run, measures, return_mean=False) for run in ranx_runs}
    per_metric: dict[str, dict[str, np.ndarray]] = {k: {} for k in keys}
    for run in ranx_runs:
        values = per_run[run.name]
        if len(measures) == 1:
            values = {measures[0]: values}
        for k, m in zip(keys, measures):
            per_metric[k][run.name] = np.asarray(values[m], dtype=np.float64)

    def p_values(m: str, s: str) -> float:
        return float(report.comparisons[frozenset([base, s])][ranx_name(m)]["p_value"])

    table = _test(names, base, per_metric, p_values, correction, seed)
    return Comparison(
        len(questions),
        base,
        correction,
        f"ranx {level}-level: compare (Fisher's randomization test); paired bootstrap with scipy",
        table,
        questions,
        {m: {s: v.tolist() for s, v in by.items()} for m, by in per_metric.items()},
        notes,
        {s.name: [] for s in systems},
    )


def per_question_csv(c: Comparison) -> str:
    """One row per question and metric: each system's score and who wins (ties: '=')."""
    buf = io.StringIO()
    systems = list(next(iter(c.per_question.values())))
    w = csv.writer(buf)
    w.writerow(["id", "metric", *systems, "best"])
    for m, by in c.per_question.items():
        for i, q in enumerate(c.questions):
            values = [by[s][i] for s in systems]
            top = max(values)
            winners = [s for s, v in zip(systems, values) if v == top]
            w.writerow(
                [q, m, *(round(v, 6) for v in values), "=" if len(winners) == len(systems) else "+".join(winners)]
            )
    return buf.getvalue()


def markdown(c: Comparison) -> str:
    """Systems as rows, metrics as columns: mean, and for the others diff [CI] with † / ‡ marks."""
    systems = list(next(iter(c.metrics.values())))
    head = "| system | " + " | ".join(c.metrics) + " |"
    lines = [head, "|---|" + "---|" * len(c.metrics)]
    for s in systems:
        cells = []
        for m in c.metrics:
            r = c.metrics[m][s]
            if s == c.baseline:
                cells.append(f"{r['mean']:.3f}")
            else:
                lo, hi = r["ci95"]
                cells.append(f"{r['mean']:.3f}{mark(r['p'])} ({r['diff']:+.3f} [{lo:+.3f}, {hi:+.3f}])")
        lines.append(f"| {s}{' (baseline)' if s == c.baseline else ''} | " + " | ".join(cells) + " |")
    legend = LEGEND.format(correction=c.correction)
    return (
        "\n".join(lines)
        + f"\n\n{c.n} questions. Cells: mean (difference to the baseline [95% paired bootstrap interval]). {legend}.\n"
    )


def plot(c: Comparison, out: Path) -> list[Path]:
    """means.png: each metric's mean with its 95% interval per system; diffs.png: per-question differences."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return []
    names = list(next(iter(c.metrics.values())))
    ms = list(c.metrics)
    files = []
    fig, axes = plt.subplots(1, len(ms), figsize=(3.2 * len(ms), 3.6), squeeze=False)
    for ax, m in zip(axes[0], ms):
        means: list[float] = []
        errs: list[list[float]] = [[], []]
        for s in names:
            scores = np.asarray(c.per_question[m][s])
            lo, hi = bootstrap_ci(scores)
            means.append(float(scores.mean()))
            # A percentile interval need not hold the mean to the last bit: no negative bars.
            errs[0].append(max(0.0, scores.mean() - lo))
            errs[1].append(max(0.0, hi - scores.mean()))
        ax.errorbar(range(len(names)), means, yerr=errs, fmt="o", color="#154273", capsize=4)
        ax.set_xticks(range(len(names)), names, rotation=30, ha="right", fontsize=7)
        ax.set_title(m, fontsize=9)
    fig.suptitle(f"mean and 95% bootstrap interval, {c.n} questions", fontsize=9)
    fig.tight_layout()
    files.append(out / "means.png")
    fig.savefig(files[-1], dpi=110)
    plt.close(fig)
    others = [s for s in names if s != c.baseline]
    fig, axes = plt.subplots(1, len(ms), figsize=(3.2 * len(ms), 3.6), squeeze=False)
    for ax, m in zip(axes[0], ms):
        base = np.asarray(c.per_question[m][c.baseline])
        for s in others:
            diff = np.sort(np.asarray(c.per_question[m][s]) - base)
            ax.plot(range(len(diff)), diff, marker=".", lw=1, label=s)
        ax.axhline(0, color="#888", lw=0.8)
        ax.set_title(m, fontsize=9)
        ax.set_xlabel("questions, sorted", fontsize=7)
    axes[0][0].set_ylabel(f"score - {c.baseline}", fontsize=7)
    axes[0][-1].legend(fontsize=6)
    fig.tight_layout()
    files.append(out / "diffs.png")
    fig.savefig(files[-1], dpi=110)
    plt.close(fig)
    return files
