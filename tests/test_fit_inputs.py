"""`wetqa fit` checks every argument and its --out before any work, and refuses in one line what it cannot fit
(issue 55, items 10-12 and 22)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

pytestmark = pytest.mark.unit


def wetqa(*argv):
    return subprocess.run([sys.executable, "-m", "wetqa", *argv], capture_output=True, text=True)


@pytest.fixture
def dataset(tmp_path):
    path = tmp_path / "qs.jsonl"
    rows = [{"id": f"q{i}", "question": "Wanneer kan de rechtbank het gezag van een ouder beëindigen?",
             "articles": [{"law_id": "BWBR9990001", "article": "Artikel 266"}]} for i in range(6)]  # fmt: skip
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def test_an_out_inside_a_built_index_is_refused_before_any_work(articles_index, dataset):
    for kind in ("ranking", "confidence"):
        run = wetqa("fit", kind, "--index", str(articles_index), "--dataset", str(dataset),
                    "--out", str(articles_index / f"{kind}.json"), "--no-progress")  # fmt: skip
        assert run.returncode == 2 and "inside" in run.stderr and run.stderr.count("\n") == 1, run.stderr
        assert not (articles_index / f"{kind}.json").exists()


def test_fit_writes_only_where_out_says(articles_index, dataset):
    """`fit` without --out merged its models into the installed package's files (review finding 15): --out is
    required (the shipped files are written only when named)."""
    from wetqa.retrieval.fitting import ranking as fitting

    for kind in ("ranking", "confidence"):
        run = wetqa("fit", kind, "--index", str(articles_index), "--dataset", str(dataset), "--no-progress")
        assert run.returncode == 2 and "--out" in run.stderr and run.stderr.count("\n") == 1, run.stderr
        # The shipped files, named when a developer refits them: the package's own, where the ranking reads them.
        assert fitting.shipped_path(kind).parent.name == "ranking" and fitting.shipped_path(kind).is_file()


def test_a_folder_given_as_a_dataset_is_named_as_one(articles_index, tmp_path):
    run = wetqa("fit", "ranking", "--index", str(articles_index), "--dataset", str(tmp_path), "--no-progress",
                "--out", str(tmp_path / "ranking.json"))  # fmt: skip
    assert run.returncode == 2 and "is a folder" in run.stderr, run.stderr


def test_confidence_on_questions_of_one_class_is_refused(articles_index, dataset, tmp_path):
    out = tmp_path / "confidence.json"
    run = wetqa("fit", "confidence", "--index", str(articles_index), "--dataset", str(dataset), "--reader", "none",
                "--folds", "2", "--out", str(out), "--no-progress")  # fmt: skip
    assert run.returncode == 2 and "answerable" in run.stderr and run.stderr.count("\n") == 1, run.stderr
    assert not out.exists()


def test_ranking_without_a_question_the_index_can_answer_is_one_line(articles_index, tmp_path):
    path = tmp_path / "elsewhere.jsonl"
    rows = [{"id": f"q{i}", "question": "Wanneer is diefstal strafbaar?", "laws": ["BWBR0001854"]} for i in range(6)]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    run = wetqa("fit", "ranking", "--index", str(articles_index), "--dataset", str(path), "--reader", "none",
                "--folds", "2", "--out", str(tmp_path / "r.json"), "--no-progress")  # fmt: skip
    assert run.returncode == 2 and "the gold law of no question" in run.stderr, run.stderr
    assert "Traceback" not in run.stderr and "reshape" not in run.stderr


def test_a_refused_compare_leaves_no_folder_behind(tmp_path, dataset):
    """A refused `eval compare` (exit 2, nothing done) still made its output folder (issue 55, item 14)."""
    out = tmp_path / "cmp"
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    run = wetqa(
        "eval", "compare", str(tmp_path / "a"), str(tmp_path / "b"), "--dataset", str(dataset), "--out", str(out)
    )
    assert run.returncode == 2, run.stderr
    assert not out.exists()


def test_no_questions_reaches_every_pipeline_the_confidence_is_fitted_on(monkeypatch, dataset, tmp_path):
    """`fit confidence --no-questions` (review finding 2): each index's pipelines are built without the questions
    view, the second and later ones too (a loop variable once took the flag's name)."""
    from wetqa.retrieval import spec as spec_module
    from wetqa.retrieval.fitting import ranking as fitting

    seen = []

    class Pipeline:
        key, features = "articles", None

        class index:  # noqa: N801  (the law table a fit reads)
            class laws:  # noqa: N801
                ids = ["BWBR9990001"]

        def rank(self, questions, k, contexts=None):
            from wetqa.retrieval._base import Ranking

            return [Ranking(q, [], signals={}) for q in questions]

    class Recorder:
        def __init__(self, **kwargs):
            seen.append(kwargs["questions"])

        def build(self):
            return Pipeline()

    monkeypatch.setattr(spec_module, "RetrievalSpec", Recorder)
    monkeypatch.setattr("wetqa.retrieval.engines.index.read_index_meta", lambda path: {"rescore": {"model": "m"}})
    fitting.collect_signals([tmp_path / "a", tmp_path / "b"], [dataset], progress=False, questions=False)
    assert seen == [False] * 4
