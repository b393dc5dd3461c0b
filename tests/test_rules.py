"""The hand-written rules about Dutch legal language are data (retrieval/rules/*.tsv), each hashed into a run's
identity: a run notices when one changes."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from wetqa.retrieval import rules

pytestmark = pytest.mark.unit


def test_every_rule_file_is_read_and_none_is_left_in_code():
    from wetqa.retrieval import conversation, dutch
    from wetqa.retrieval.articles import candidates
    from wetqa.retrieval.ranking import confidence

    assert dutch.CONVENTIONAL["awb"] == "algemene wet bestuursrecht"
    assert "wanneer" in dutch.QUESTION_FRAMES and "wetboek van strafrecht" in dutch.KNOWN_TITLES
    assert candidates.KIND_GROUPS["amvb"][0] == "AMvB" and "the" in confidence._ENGLISH
    assert conversation._SWITCH.match("iets anders: hoe zit het met de AOW?")
    listed = {p.name for p in Path(rules.__file__).parent.glob("*.tsv")}
    assert listed == set(rules.FILES)  # a rules file no digest covers would change answers unnoticed
    for name in rules.FILES:
        assert rules.rows(name), name


def test_a_changed_rule_changes_the_runs_identity(tmp_path, monkeypatch):
    from wetqa.retrieval.pipeline import model_digests

    before = model_digests()
    assert set(before["rules"]) == set(rules.FILES)
    copy = tmp_path / "rules"
    shutil.copytree(Path(rules.__file__).parent, copy)
    with open(copy / "question_frames.tsv", "a", encoding="utf-8") as fh:
        fh.write("eigenlijk\n")
    monkeypatch.setattr(rules.resources, "files", lambda package: copy)
    after = model_digests()["rules"]
    assert after["question_frames.tsv"] != before["rules"]["question_frames.tsv"]
    assert {k: v for k, v in after.items() if k != "question_frames.tsv"} == {
        k: v for k, v in before["rules"].items() if k != "question_frames.tsv"
    }


def test_doctor_lists_the_models_wetqa_made_and_the_question_set(tmp_path, monkeypatch):
    """`doctor` did not list the fetched models (issue 55, item 19)."""
    import json
    import subprocess
    import sys

    models = tmp_path / "cache" / "models"
    (models / "embeddinggemma-300m").mkdir(parents=True)
    (models / "embeddinggemma-300m" / "wetqa-model.json").write_text(json.dumps({"kind": "wetqa-fetched-model"}))
    env = {**__import__("os").environ, "WETQA_CACHE": str(tmp_path / "cache")}
    run = subprocess.run([sys.executable, "-m", "wetqa", "doctor", "--output", "json"], capture_output=True, text=True,
                         env=env)  # fmt: skip
    assert run.returncode == 0, run.stderr
    report = json.loads(run.stdout)
    (listed,) = report["wetqa_models"]
    assert listed["name"] == "embeddinggemma-300m" and listed["kind"] == "wetqa-fetched-model"
    assert listed["onnx_export"] is False and listed["problem"]  # no weights: said so
    assert report["question_set"]["questions"] > 0


def test_doctor_reports_a_damaged_question_set_instead_of_failing(monkeypatch):
    """`doctor` failed as a whole on a damaged shipped set (review finding 19)."""
    from wetqa import doctor
    from wetqa.retrieval import RetrievalError, questions

    def damaged():
        raise RetrievalError("questions.jsonl.gz: not a readable gzip file")

    monkeypatch.setattr(questions, "shipped", damaged)
    report = doctor._question_set()
    assert report["problem"] == "questions.jsonl.gz: not a readable gzip file"


def test_doctor_reports_a_question_set_damaged_inside_its_compressed_stream(monkeypatch, tmp_path):
    """Damage inside the gzip stream raised zlib's own error through doctor (second review, finding 7)."""
    from wetqa import doctor
    from wetqa.retrieval import questions

    copy = tmp_path / "questions.jsonl.gz"
    data = bytearray(questions.shipped_path().read_bytes())
    data[200:208] = b"\x00\xff" * 4
    copy.write_bytes(bytes(data))
    monkeypatch.setattr(questions, "shipped_path", lambda: copy)
    questions.shipped.cache_clear()
    try:
        report = doctor._question_set()
    finally:
        questions.shipped.cache_clear()
    assert str(copy) in report["problem"] and "gzip" in report["problem"]
