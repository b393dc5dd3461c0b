"""Comparisons a reviewer accepts: paired intervals, randomization tests, corrections, `wetqa eval compare`."""

from __future__ import annotations

import itertools
import json

import numpy as np
import pytest
from scipy import stats

from wetqa.cli import main
from wetqa.config import ConfigError, load_experiment
from wetqa.evaluation.significance import bootstrap_ci, correct, mark, randomization_p
from wetqa.experiment import run_experiment

from .test_experiment import GRID, _write

QUESTIONS = [
    {"id": str(i), "question": f"vraag {i}", "answer": "de rechtbank kan het gezag beëindigen", "articles": []}
    for i in range(1, 7)
]


@pytest.mark.unit
def test_the_randomization_p_value_is_the_exact_sign_flip_count_by_hand():
    a = [0.2, 0.5, 0.1, 0.9, 0.4]
    b = [0.6, 0.5, 0.4, 1.0, 0.3]
    diffs = np.subtract(b, a)
    observed = abs(diffs.mean())
    # By hand: all 2^5 ways of swapping each question's two scores; p = share at least as extreme.
    flips = [np.mean(diffs * signs) for signs in itertools.product((1, -1), repeat=len(diffs))]
    by_hand = sum(abs(f) >= observed - 1e-12 for f in flips) / len(flips)
    assert randomization_p(a, b) == pytest.approx(by_hand)  # 32 < 10,000: scipy enumerates them all
    assert by_hand == pytest.approx(12 / 32)  # |.4 ± .3 ± .1 ± .1| >= .7: 6 of 16 sign patterns


@pytest.mark.unit
def test_the_bootstrap_interval_is_scipys_percentile_bootstrap_with_the_seed():
    diffs = np.asarray([0.1, -0.2, 0.3, 0.0, 0.25, 0.05, -0.1, 0.4])
    lo, hi = bootstrap_ci(diffs, seed=7)
    direct = stats.bootstrap(
        (diffs,), np.mean, n_resamples=10_000, method="percentile", random_state=np.random.default_rng(7)
    ).confidence_interval
    assert (lo, hi) == pytest.approx((direct.low, direct.high))
    assert lo < diffs.mean() < hi
    # And by hand: the 2.5th and 97.5th percentiles of the means of 10,000 resamples (scipy's draw order).
    rng = np.random.default_rng(7)
    means = diffs[rng.integers(0, len(diffs), size=(10_000, len(diffs)))].mean(axis=1)
    assert (lo, hi) == pytest.approx(tuple(np.percentile(means, [2.5, 97.5])), abs=0.02)


@pytest.mark.unit
def test_holm_and_bonferroni_by_hand_and_the_marks():
    assert correct([0.01, 0.04, 0.03], "bonferroni") == pytest.approx([0.03, 0.12, 0.09])
    # Holm: sorted .01, .03, .04 times 3, 2, 1 -> .03, .06, .04 -> running max .03, .06, .06.
    assert correct([0.01, 0.04, 0.03], "holm") == pytest.approx([0.03, 0.06, 0.06])
    assert correct([0.2], "holm") == [0.2]
    assert (mark(0.004), mark(0.03), mark(0.2), mark(None)) == ("‡", "†", "", "")


def _runs(tmp_path, name: str, answers: dict[str, tuple[str, list[str]]], extra: dict | None = None):
    folder = tmp_path / name
    folder.mkdir()
    lines = [
        json.dumps({"id": q, "answer": text, "cited_ids": cited, **(extra or {}).get(q, {})})
        for q, (text, cited) in answers.items()
    ]
    (folder / "run-1.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return folder


@pytest.fixture
def dataset(tmp_path):
    path = tmp_path / "qa.jsonl"
    rows = [{**q, "articles": [{"law_id": "BWBR9990001", "article": "Artikel 266"}]} for q in QUESTIONS]
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n", encoding="utf-8")
    return path


GOOD = "de rechtbank kan het gezag beëindigen"


@pytest.mark.unit
def test_a_system_against_itself_differs_by_nothing(tmp_path, dataset, fixture_corpus, capsys):
    answers = {q["id"]: (GOOD if int(q["id"]) % 2 else "iets anders", []) for q in QUESTIONS}
    a = _runs(tmp_path, "a", answers)
    b = _runs(tmp_path, "b", answers)
    args = ["eval", "compare", str(a), str(b), "--dataset", str(dataset), "--corpus", str(fixture_corpus)]
    assert main([*args, "--out", str(tmp_path / "cmp"), "--output", "json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["n"] == 6 and report["baseline"] == "a" and report["correction"] == "holm"
    for scores in report["metrics"].values():
        assert scores["b"]["diff"] == 0.0 and scores["b"]["p"] == 1.0
        lo, hi = scores["b"]["ci95"]
        assert lo <= 0.0 <= hi
        assert scores["a"] == {"mean": scores["b"]["mean"], "diff": 0.0, "ci95": [0.0, 0.0], "p": 1.0}


@pytest.mark.unit
def test_compare_reports_means_paired_intervals_and_tests_and_writes_its_files(
    tmp_path, dataset, fixture_corpus, capsys
):
    # Fixture chunk ids of Artikel 266 (the gold article) and of another article.
    from wetqa.corpus import load_chunks

    chunks = load_chunks(fixture_corpus)
    right = next(c.id for c in chunks if c.article == "Artikel 266")
    wrong = next(c.id for c in chunks if c.article != "Artikel 266")
    base = _runs(tmp_path, "old", {q["id"]: ("iets", [wrong]) for q in QUESTIONS})
    better = _runs(tmp_path, "new", {q["id"]: (GOOD, [right]) for q in QUESTIONS})
    out = tmp_path / "cmp"
    argv = ["eval", "compare", str(base), str(better), "--dataset", str(dataset), "--corpus", str(fixture_corpus)]
    assert main([*argv, "--out", str(out), "--metrics", "rougeL,article_hit", "--output", "json"]) == 0
    report = json.loads(capsys.readouterr().out)
    hit = report["metrics"]["article_hit"]
    assert hit["old"]["mean"] == 0.0 and hit["new"]["mean"] == 1.0 and hit["new"]["diff"] == 1.0
    assert hit["new"]["ci95"] == [1.0, 1.0]
    assert hit["new"]["p"] == pytest.approx(2 / 64)  # exact: only the all-new and all-old assignments as extreme
    assert "scipy" in report["engine"]
    for name in ("per_question.csv", "table.md", "means.png", "diffs.png", "compare.json"):
        assert str(out / name) in report["files"] and (out / name).is_file()
    csv_rows = (out / "per_question.csv").read_text().splitlines()
    assert csv_rows[0] == "id,metric,old,new,best" and len(csv_rows) == 1 + 2 * 6
    assert csv_rows[1].endswith(",new")
    table = (out / "table.md").read_text()
    assert "| new | " in table and "1.000† (+1.000 [+1.000, +1.000])" in table
    assert "† p < 0.05, ‡ p < 0.01" in table
    # A folder of another program is not written into.
    foreign = tmp_path / "theirs"
    foreign.mkdir()
    (foreign / "notes.txt").write_text("mine")
    assert main([*argv, "--out", str(foreign)]) == 2
    assert "wetqa did not write" in capsys.readouterr().err


@pytest.mark.unit
def test_bad_comparisons_are_refused_in_one_line_or_warned(tmp_path, dataset, fixture_corpus, capsys):
    argv = ["eval", "compare", "--dataset", str(dataset), "--corpus", str(fixture_corpus)]
    full = _runs(tmp_path, "full", {q["id"]: (GOOD, []) for q in QUESTIONS})
    # Different question sets: compared on the intersection, with a warning naming the counts.
    half = _runs(tmp_path, "half", {q["id"]: (GOOD, []) for q in QUESTIONS[:3]})
    assert main([*argv, str(full), str(half), "--out", str(tmp_path / "c1"), "--output", "json"]) == 0
    captured = capsys.readouterr()
    assert json.loads(captured.out)["n"] == 3
    assert "full: 6, half: 3" in captured.err and "compared on the 3" in captured.err
    # Disjoint: refused.
    other = _runs(tmp_path, "other", {"99": (GOOD, [])})
    assert main([*argv, str(full), str(other), "--out", str(tmp_path / "c2")]) == 2
    err = capsys.readouterr().err
    assert "no question in common" in err and len(err.strip().splitlines()) == 1
    # Failed answers: counted and named, left out of every system.
    failing = _runs(tmp_path, "failing", {q["id"]: (GOOD, []) for q in QUESTIONS}, extra={"2": {"error": "timeout"}})
    assert main([*argv, str(full), str(failing), "--out", str(tmp_path / "c3"), "--output", "json"]) == 0
    captured = capsys.readouterr()
    report = json.loads(captured.out)
    assert report["n"] == 5 and report["failed"] == {"failing": {"count": 1, "ids": ["2"]}}
    assert "failing: 1 failed answer(s) left out (2)" in captured.err
    # A metric one run lacks (an eval generation folder without G-Eval scores).
    scored = tmp_path / "scored"
    scored.mkdir()
    (scored / "scores.jsonl").write_text(json.dumps({"run": "run-1", "id": "1", "rougeL": 0.5}) + "\n")
    assert main([*argv, str(scored), str(full), "--metrics", "geval_coherence", "--out", str(tmp_path / "c4")]) == 2
    assert "metric geval_coherence missing from" in capsys.readouterr().err
    # One system, an unknown baseline, an unknown metric, a folder of nothing.
    assert main([*argv, str(full), "--out", str(tmp_path / "c5")]) == 2
    assert "two or more" in capsys.readouterr().err
    assert main([*argv, str(full), str(half), "--baseline", "nope", "--out", str(tmp_path / "c6")]) == 2
    assert "--baseline 'nope' is none of the systems" in capsys.readouterr().err
    assert main([*argv, str(full), str(half), "--metrics", "bleu", "--out", str(tmp_path / "c7")]) == 2
    assert "unknown answer metric 'bleu'" in capsys.readouterr().err
    empty = tmp_path / "empty"
    empty.mkdir()
    assert main([*argv, str(full), str(empty), "--out", str(tmp_path / "c8")]) == 2
    assert "no run-*.jsonl" in capsys.readouterr().err


@pytest.mark.unit
def test_eval_generation_tables_carry_the_interval_over_questions(tmp_path, dataset, fixture_corpus, capsys):
    run = _runs(tmp_path, "run", {q["id"]: (GOOD if q["id"] in "123" else "iets", []) for q in QUESTIONS})
    argv = ["eval", "generation", "--runs", str(run), "--dataset", str(dataset), "--corpus", str(fixture_corpus)]
    assert main([*argv, "--metrics", "rouge", "--output", "json", "--allow-failures"]) == 0
    summary = json.loads(capsys.readouterr().out)["summary"]["rougeL"]
    lo, hi = summary["ci95"]
    assert lo < summary["mean"] < hi and summary["questions"] == 6
    assert "ci95_lo_x100" in (run / "eval" / "metrics.csv").read_text()
    assert f"[{lo:.1f}, {hi:.1f}]" in (run / "eval" / "table.md").read_text()


@pytest.mark.unit
def test_an_experiment_marks_cells_against_its_baseline_row(tmp_path):
    body = GRID.replace('out = "out"', 'out = "out"\nbaseline = "bm25s+extractive@k1"')
    cfg = load_experiment(_write(tmp_path, body))
    result = run_experiment(cfg)
    saved = json.loads((tmp_path / "out" / "results.json").read_text())
    assert saved["baseline"] == "bm25s+extractive@k1"
    tests = saved["significance"]
    assert set(tests) == set(result["generation"]) - {"bm25s+extractive@k1"}
    assert all(0.0 <= cell["p"] <= 1.0 for row in tests.values() for cell in row.values())
    table = (tmp_path / "out" / "table.md").read_text()
    assert "Baseline: bm25s+extractive@k1; † p < 0.05" in table and "[95% interval over questions]" in table
    with pytest.raises(ConfigError, match="baseline 'nope' is no row of the grid"):
        load_experiment(_write(tmp_path, GRID.replace('out = "out"', 'out = "out"\nbaseline = "nope"')))


@pytest.mark.integration
def test_retrieval_runs_are_compared_through_ranx(tmp_path, dataset, capsys):
    def trec(name: str, ranked: dict[str, list[str]]):
        folder = tmp_path / name
        folder.mkdir()
        lines = [f"{q} Q0 {d} {r} {10 - r} {name}" for q, docs in ranked.items() for r, d in enumerate(docs, 1)]
        (folder / "run.article.trec").write_text("\n".join(lines) + "\n")
        return folder

    gold = "BWBR9990001|Artikel_266"
    first = trec("first", {q["id"]: [gold, "X|Artikel_1"] for q in QUESTIONS})
    second = trec("second", {q["id"]: (["X|Artikel_1", gold] if q["id"] in "12" else [gold]) for q in QUESTIONS})
    argv = ["eval", "compare", str(first), str(second), "--dataset", str(dataset), "--metrics", "Hit@1,MRR"]
    assert main([*argv, "--out", str(tmp_path / "cmp"), "--output", "json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert "ranx" in report["engine"]
    hit = report["metrics"]["Hit@1"]
    assert hit["first"]["mean"] == 1.0 and hit["second"]["mean"] == pytest.approx(4 / 6)
    assert hit["second"]["diff"] == pytest.approx(-2 / 6)
    # ranx's Fisher test (10,000 random swaps) agrees with the exact test of the same scores.
    exact = randomization_p([1.0] * 6, [0, 0, 1, 1, 1, 1])
    assert hit["second"]["p"] == pytest.approx(exact, abs=0.03)
    assert report["metrics"]["MRR"]["second"]["mean"] == pytest.approx((2 * 0.5 + 4) / 6)
    mixed = tmp_path / "answers"
    mixed.mkdir()
    (mixed / "run-1.jsonl").write_text(json.dumps({"id": "1", "answer": "x", "cited_ids": []}) + "\n")
    assert (
        main(["eval", "compare", str(first), str(mixed), "--dataset", str(dataset), "--out", str(tmp_path / "c2")]) == 2
    )
    assert "cannot compare retrieval runs" in capsys.readouterr().err


def _strict_json(text: str):
    def refuse(constant):
        raise AssertionError(f"{constant} is not JSON")

    return json.loads(text, parse_constant=refuse)


@pytest.mark.unit
def test_scores_that_are_not_finite_and_garbage_lines_are_left_out_and_named(tmp_path, dataset, capsys):
    """NaN and Infinity in a scores.jsonl, and lines that are no records, gave a mean of nan, an interval of
    [nan, nan], a ‡ and a compare.json that was not JSON; garbage lines were skipped without a word."""
    ids = [q["id"] for q in QUESTIONS]
    folders = {}
    for name, bad in (("a", {}), ("b", {"2": "NaN", "3": "Infinity", "4": "-Infinity"})):
        folder = tmp_path / name
        folder.mkdir()
        lines = [
            f'{{"run": "{name}/run-1", "id": "{q}", "rougeL": {bad.get(q, 0.5 if name == "a" else 0.7)}}}' for q in ids
        ]
        lines.insert(2, "this is not a record")
        (folder / "scores.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
        folders[name] = folder
    out = tmp_path / "cmp"
    argv = ["eval", "compare", str(folders["a"]), str(folders["b"]), "--dataset", str(dataset)]
    assert main([*argv, "--metrics", "rougeL", "--out", str(out), "--output", "json"]) == 0
    captured = capsys.readouterr()
    report = _strict_json(captured.out)
    stored = _strict_json((out / "compare.json").read_text())
    assert stored["metrics"] == report["metrics"]
    b = report["metrics"]["rougeL"]["b"]
    assert report["n"] == 3 and b["mean"] == pytest.approx(0.7) and b["diff"] == pytest.approx(0.2)
    assert all(np.isfinite(b["ci95"])) and report["failed"]["b"]["count"] == 3
    assert "not a finite score" in captured.err and "not a record" in captured.err
    assert "scores.jsonl:3" in captured.err


@pytest.mark.unit
def test_trec_runs_with_scores_that_are_not_numbers_are_named(tmp_path, dataset, capsys):
    folders = []
    for name in ("x", "y"):
        folder = tmp_path / name
        folder.mkdir()
        lines = [f"{q} Q0 BWBR9990001|Artikel_266 1 {'nan' if name == 'y' and q == '1' else '2.5'} t" for q in "123456"]
        lines.append("garbage")
        (folder / "run.article.trec").write_text("\n".join(lines) + "\n", encoding="utf-8")
        folders.append(str(folder))
    out = tmp_path / "cmp"
    argv = ["eval", "compare", *folders, "--dataset", str(dataset), "--out", str(out), "--output", "json"]
    assert main([*argv, "--metrics", "Hit@1"]) == 0
    captured = capsys.readouterr()
    report = _strict_json(captured.out)
    _strict_json((out / "compare.json").read_text())
    assert "run.article.trec:1" in captured.err and "run.article.trec:7" in captured.err, captured.err
    assert np.isfinite(report["metrics"]["Hit@1"]["y"]["mean"])
