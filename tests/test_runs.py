"""Run folders know their inputs: resumed only with the same ones, failed answers retried."""

from __future__ import annotations

import json

import pytest

from wetqa.cli import main
from wetqa.corpus.dataset import QAItem
from wetqa.generation import GenerationError, Pipeline, make_backend, resolve_generator
from wetqa.generation._base import BackendBase, Generation
from wetqa.generation.runs import generate_runs, read_done, run_inputs
from wetqa.retrieval import build_index, index_identity, open_index

pytestmark = pytest.mark.unit

QUESTIONS = ["Wanneer kan de rechtbank het gezag beëindigen?", "Wat regelt de wet over griffierechten?"]


@pytest.fixture(scope="module")
def index(articles_index):
    return articles_index


def _dataset(tmp_path):
    path = tmp_path / "d.jsonl"
    path.write_text("".join(json.dumps({"id": str(i), "question": q}) + "\n" for i, q in enumerate(QUESTIONS, 1)))
    return path


def test_a_folder_is_resumed_only_with_the_inputs_it_was_made_with(index, tmp_path, capsys):
    data, out = _dataset(tmp_path), tmp_path / "run"
    base = ["generate", "--dataset", str(data), "--index", str(index), "--out", str(out)]
    assert main(base) == 0
    config = json.loads((out / "config.json").read_text())
    assert config["inputs"]["k"] == 3 and config["dataset"].startswith("/")  # absolute: evaluated from anywhere
    assert main(base) == 0  # same inputs: resumed (nothing to do)
    assert main([*base, "-k", "5"]) == 2
    err = capsys.readouterr().err
    assert "holds runs made with other inputs (k changed)" in err and "--force" in err
    assert json.loads((out / "config.json").read_text())["inputs"]["k"] == 3  # not rewritten to claim k=5
    assert main([*base, "-k", "5", "--force"]) == 0
    assert json.loads((out / "config.json").read_text())["inputs"]["k"] == 5
    assert all(r["k"] == 5 for r in read_done(out / "run-1.jsonl").values())


def test_another_index_or_prompt_is_another_input(index, fixture_corpus, tmp_path):
    other = tmp_path / "other"
    build_index(fixture_corpus, "articles", other, {"heading_weight": 0.0}, progress=False)
    gen = resolve_generator("extractive").to_json()
    a = run_inputs("articles", 3, "nl", gen, [index_identity(index)])
    b = run_inputs("articles", 3, "nl", gen, [index_identity(other)])
    c = run_inputs("articles", 3, "en", gen, [index_identity(index)])
    assert a != b and a["prompt"] != c["prompt"]


class FlakyBackend(BackendBase):
    """The extractive backend, except that its first call fails (a dead server coming back)."""

    name = "flaky"

    def __init__(self):
        self.inner = make_backend(resolve_generator("extractive"))
        self.calls = 0

    def generate(self, requests):
        self.calls += 1
        if self.calls == 1:
            return [Generation(error="connection refused") for _ in requests]
        return self.inner.generate(requests)


def test_resume_retries_failed_answers(index, tmp_path):
    items = [QAItem(str(i), q) for i, q in enumerate(QUESTIONS, 1)]
    pipeline = Pipeline(open_index(index), FlakyBackend(), k=3)
    inputs = run_inputs(pipeline.retriever.name, 3, "nl", {"kind": "flaky"}, [index_identity(index)])
    first = generate_runs(pipeline, items, tmp_path / "r", inputs=inputs, progress=False)
    assert first["runs"][0]["failed"] == 2
    second = generate_runs(pipeline, items, tmp_path / "r", inputs=inputs, progress=False)
    assert second["runs"][0]["failed"] == 0
    done = read_done(tmp_path / "r" / "run-1.jsonl")
    assert all(not r["error"] and r["answer"] for r in done.values())
    # The file keeps both attempts; readers take the latest.
    assert len((tmp_path / "r" / "run-1.jsonl").read_text().splitlines()) == 4
    from wetqa.evaluation.answers import load_run

    records, problems = load_run(tmp_path / "r" / "run-1.jsonl")
    assert len(records) == 2 and not problems and all(not r["error"] for r in records)


def test_force_clears_only_run_files(index, tmp_path):
    from wetqa.generation.runs import check_run_folder
    from wetqa.io import OutputError

    data, out = _dataset(tmp_path), tmp_path / "r"
    assert main(["generate", "--dataset", str(data), "--index", str(index), "--out", str(out)]) == 0
    inputs = run_inputs("articles", 3, "nl", {}, [index_identity(index)])
    with pytest.raises(GenerationError, match="other inputs"):
        check_run_folder(out, inputs)
    check_run_folder(out, inputs, force=True)
    assert not (out / "run-1.jsonl").exists() and (out / "config.json").is_file()
    # A run file in a folder wetqa did not make is the user's: refused, with --force too, and kept.
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "run-1.jsonl").write_text('{"id": "1", "answer": "x"}\n')
    (mine / "notes.md").write_text("mine")
    for force in (False, True):
        with pytest.raises(OutputError, match="wetqa did not write"):
            check_run_folder(mine, inputs, force=force)
    assert (mine / "run-1.jsonl").is_file() and (mine / "notes.md").read_text() == "mine"


def test_a_folder_is_resumed_only_for_the_questions_its_answers_answer(index, tmp_path, capsys):
    # A defect hunt: the same folder resumed with a dataset whose question 1 had another text kept the old
    # answer (and `eval generation` scored it against the new reference), while config.json claimed the new
    # dataset.
    data, out = _dataset(tmp_path), tmp_path / "run"
    base = ["--index", str(index), "--out", str(out)]
    assert main(["generate", "--dataset", str(data), *base]) == 0
    answers, config = (out / "run-1.jsonl").read_bytes(), (out / "config.json").read_bytes()
    changed = tmp_path / "changed.jsonl"
    changed.write_text(json.dumps({"id": "1", "question": "Wanneer eindigt het ouderlijk gezag?"}) + "\n")
    capsys.readouterr()
    assert main(["generate", "--dataset", str(changed), *base]) == 2
    err = capsys.readouterr().err
    assert "run-1.jsonl answers another question under id 1" in err and "--force" in err, err
    assert len(err.strip().splitlines()) == 1
    assert (out / "run-1.jsonl").read_bytes() == answers and (out / "config.json").read_bytes() == config
    # A part of the same questions is resumed (nothing to do), and --force answers the new question.
    part = tmp_path / "part.jsonl"
    part.write_text(data.read_text().splitlines()[1] + "\n")
    assert main(["generate", "--dataset", str(part), *base]) == 0
    assert main(["generate", "--dataset", str(changed), *base, "--force"]) == 0
    done = read_done(out / "run-1.jsonl")
    assert list(done) == ["1"] and done["1"]["question"] == "Wanneer eindigt het ouderlijk gezag?"
