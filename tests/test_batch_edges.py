"""The researcher's batch path as a defect hunt drove it (generate, eval generation, eval compare,
experiment): what is scored is what was asked, and every mistake is one line and exit 2. Each failed before
its fix."""

from __future__ import annotations

import json

import pytest

from wetqa.cli import main

from .test_experiment import GRID, _write

pytestmark = pytest.mark.unit

Q = [
    ("1", "Wanneer kan de rechtbank het gezag van een ouder beëindigen?", "De rechtbank kan het gezag beëindigen."),
    ("2", "Wanneer heeft een vreemdeling rechtmatig verblijf?", "Met een geldige verblijfsvergunning."),
    ("3", "Wat regelt de wet over griffierechten?", "Griffierecht wordt geheven."),
    ("4", "Wanneer eindigt het ouderlijk gezag?", "Bij meerderjarigheid."),
]


def _data(tmp_path, name, rows, answers=True):
    path = tmp_path / name
    path.write_text(
        "".join(json.dumps({"id": i, "question": q, **({"answer": a} if answers else {})}) + "\n" for i, q, a in rows)
    )
    return path


@pytest.fixture(scope="module")
def index(articles_index):
    return articles_index


def _generate(index, data, out, *extra):
    return main(["generate", "--dataset", str(data), "--index", str(index), "--out", str(out), *extra])


def test_scoring_refuses_answers_to_other_questions_under_the_same_ids(index, fixture_corpus, tmp_path, capsys):
    first = _data(tmp_path, "a.jsonl", Q[:2])
    other = _data(tmp_path, "c.jsonl", [("1", Q[2][1], Q[2][2]), ("2", Q[3][1], Q[3][2])])
    assert _generate(index, first, tmp_path / "runA") == 0
    assert _generate(index, other, tmp_path / "runC") == 0
    capsys.readouterr()
    code = main(["eval", "generation", "--runs", str(tmp_path / "runA"), "--dataset", str(other),
                 "--corpus", str(fixture_corpus), "--out", str(tmp_path / "ev")])  # fmt: skip
    err = capsys.readouterr().err
    assert code == 2 and "answers another question under id 1" in err and len(err.strip().splitlines()) == 1, err
    code = main(["eval", "compare", str(tmp_path / "runA"), str(tmp_path / "runC"), "--dataset", str(other),
                 "--corpus", str(fixture_corpus), "--out", str(tmp_path / "cmp")])  # fmt: skip
    err = capsys.readouterr().err
    assert code == 2 and "answers another question under id 1" in err, err


def test_a_run_folder_made_for_another_dataset_is_refused(index, tmp_path, capsys):
    out = tmp_path / "run"
    assert _generate(index, _data(tmp_path, "a.jsonl", Q[:2]), out) == 0
    answers = (out / "run-1.jsonl").read_bytes()
    capsys.readouterr()
    assert _generate(index, _data(tmp_path, "b.jsonl", Q[2:]), out) == 2  # it appended: 4 answers, 2 datasets
    err = capsys.readouterr().err
    assert "another dataset" in err and "--force" in err and len(err.strip().splitlines()) == 1, err
    assert (out / "run-1.jsonl").read_bytes() == answers
    assert _generate(index, _data(tmp_path, "all.jsonl", Q), out) == 0  # more of the same questions: resumed


def test_runs_over_fewer_questions_are_left_out_of_the_mean_over_runs(index, fixture_corpus, tmp_path, capsys):
    data, out = _data(tmp_path, "d.jsonl", Q[:3]), tmp_path / "run"
    assert _generate(index, data, out) == 0
    assert _generate(index, data, out, "--runs", "2", "--limit", "1") == 0
    capsys.readouterr()
    assert main(["eval", "generation", "--runs", str(out), "--dataset", str(data), "--corpus", str(fixture_corpus),
                 "--out", str(tmp_path / "ev")]) == 0  # fmt: skip
    err = capsys.readouterr().err
    metrics = json.loads((tmp_path / "ev" / "metrics.json").read_text())
    assert metrics["summary"]["article_hit"]["runs"] == 1, metrics["summary"]["article_hit"]
    assert [r["run"] for r in metrics["left_out_runs"]] == ["run/run-2"] and "run-2" in err, err


def test_fewer_runs_asked_of_a_folder_score_only_those(index, fixture_corpus, tmp_path):
    data, out = _data(tmp_path, "d.jsonl", Q[:2]), tmp_path / "run"
    assert _generate(index, data, out, "--runs", "2") == 0
    assert _generate(index, data, out, "--runs", "1") == 0
    assert main(["eval", "generation", "--runs", str(out), "--dataset", str(data), "--corpus", str(fixture_corpus),
                 "--out", str(tmp_path / "ev")]) == 0  # fmt: skip
    metrics = json.loads((tmp_path / "ev" / "metrics.json").read_text())
    assert [p.rsplit("/", 1)[-1] for p in metrics["runs"]] == ["run-1.jsonl"], metrics["runs"]


def test_no_gold_answers_means_no_rouge_or_meteor_not_zero(index, fixture_corpus, tmp_path):
    data, out = _data(tmp_path, "d.jsonl", Q[:2], answers=False), tmp_path / "run"
    assert _generate(index, data, out) == 0
    assert main(["eval", "generation", "--runs", str(out), "--dataset", str(data), "--corpus", str(fixture_corpus),
                 "--out", str(tmp_path / "ev")]) == 0  # fmt: skip
    metrics = json.loads((tmp_path / "ev" / "metrics.json").read_text())
    assert "rougeL" not in metrics["summary"] and "meteor" not in metrics["summary"], metrics["summary"]
    assert "article_hit" in metrics["summary"] and "gold answers" in json.dumps(metrics["not_scored"])
    # eval compare scores them too (the CI run found float(None) there): no ROUGE-L, the rest compared.
    assert _generate(index, data, tmp_path / "run2") == 0
    assert main(["eval", "compare", str(out), str(tmp_path / "run2"), "--dataset", str(data), "--corpus",
                 str(fixture_corpus), "--out", str(tmp_path / "cmp")]) == 0  # fmt: skip
    # Nothing else asked: refused, not an empty evaluation with exit 0 (the review).
    assert main(["eval", "generation", "--runs", str(out), "--dataset", str(data), "--corpus", str(fixture_corpus),
                 "--metrics", "rouge", "--out", str(tmp_path / "ev2")]) == 2  # fmt: skip


def test_experiment_takes_force_and_names_an_unknown_retriever_or_generator(tmp_path, capsys):
    cfg = _write(tmp_path, GRID.replace("runs = 2", "runs = 1").replace("k = [1, 3]", "k = [1]"))
    assert main(["experiment", "--config", str(cfg), "--retrievers", "bm25s"]) == 0
    changed = cfg.read_text().replace('generator = "extractive"', 'generator = "extractive"\nsecond_article_gap = 0.9')
    cfg.write_text(changed)
    capsys.readouterr()
    assert main(["experiment", "--config", str(cfg), "--retrievers", "bm25s"]) == 2
    assert "--force" in capsys.readouterr().err
    assert main(["experiment", "--config", str(cfg), "--retrievers", "bm25s", "--force"]) == 0
    for flag, names in (("--retrievers", "bm25s,bm25z"), ("--retrievers", "bm25z"), ("--generators", "nope")):
        assert main(["experiment", "--config", str(cfg), flag, names]) == 2
        err = capsys.readouterr().err
        bad = names.split(",")[-1]
        assert f"unknown {flag[2:-1]} {bad!r}" in err and len(err.strip().splitlines()) == 1, err


def test_an_unknown_flag_is_named_once(capsys):
    with pytest.raises(SystemExit) as stop:
        main(["generate", "--dataset", "d.jsonl", "--out", "run", "--bogus"])
    assert stop.value.code == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("wetqa: error: ") and "wetqa: error: wetqa" not in err and "--bogus" in err, err
