import json
import subprocess
import sys

import pytest

from wetqa.evaluation.claims import (
    Claim,
    classify,
    find_evidence,
    parse_claim_list,
    parse_independence,
    parse_worthiness,
    segment,
)
from wetqa.retrieval import open_index

from .conftest import ROOT
from .tiny_models import smollm2_gguf, tiny_bert_dir

ANSWER = "De rechtbank kan het gezag van een ouder beëindigen. Dat kan als hij het gezag misbruikt."
QUESTION = "Wanneer kan de rechtbank het gezag beëindigen?"


class Recorded:
    """Answers prompts with outputs written for these tests, by what the prompt asks."""

    def __init__(self):
        self.prompts = []

    def __call__(self, prompt: str) -> str:
        self.prompts.append(prompt)
        if prompt.startswith("Splits de volgende tekst"):
            return '```json\n["De rechtbank kan het gezag van een ouder beëindigen."]\n```'
        if prompt.startswith("Hieronder staan een vraag"):
            return "- De rechtbank kan het gezag beëindigen als de ouder het gezag misbruikt.\n- Het gezag is van een ouder."
        if prompt.startswith("Classificeer"):
            return 'Mijn antwoord: {"categorie": "feitelijk"}' if "rechtbank" in prompt else "geen bewering"
        if prompt.startswith("Is de bewering zelfstandig"):
            if "hij" in prompt.split("Bewering:")[-1]:
                return '{"zelfstandig": false, "herschreven": "Het kan als de ouder het gezag misbruikt."}'
            return '{"zelfstandig": true, "herschreven": ""}'
        return "???"


@pytest.mark.unit
def test_parsers_on_recorded_outputs():
    assert parse_claim_list('{"claims": ["a", "b"]}') == ["a", "b"]
    assert parse_claim_list("1) een\n2) twee") == ["een", "twee"]
    assert parse_claim_list("niets bruikbaars") == []
    assert parse_worthiness('{"categorie": "mening"}') == "opinion"
    assert parse_worthiness("Category: not a claim") == "not_a_claim"
    assert parse_worthiness("???") == "other"
    assert parse_independence('{"independent": "no", "rewritten": "X is Y."}', "Het is Y.") == (False, "X is Y.")
    assert parse_independence("ja, zelfstandig", "c") == (True, "c")


@pytest.mark.unit
def test_segmentation_modes_and_classification():
    rec = Recorded()
    sentences = segment(ANSWER, QUESTION, "sentence")
    assert [c.text for c in sentences] == [
        "De rechtbank kan het gezag van een ouder beëindigen.",
        "Dat kan als hij het gezag misbruikt.",
    ]
    claims = segment(ANSWER, QUESTION, "claims", rec)
    assert len(claims) == 2 and claims[0].sentence == sentences[0].text
    ctx = segment(ANSWER, QUESTION, "context", rec)
    assert ctx[0].text == "De rechtbank kan het gezag beëindigen als de ouder het gezag misbruikt." and len(ctx) == 4
    assert "Vraag: " + QUESTION in rec.prompts[-1]
    claims = segment(ANSWER, QUESTION, "sentence")
    classify(claims, QUESTION, ANSWER, rec)
    assert [c.worthiness for c in claims] == ["factual", "not_a_claim"]
    assert claims[0].independent is True and claims[0].original is None
    assert claims[1].independent is False and claims[1].original == "Dat kan als hij het gezag misbruikt."
    assert claims[1].text == "Het kan als de ouder het gezag misbruikt."
    with pytest.raises(ValueError, match="needs an LLM"):
        segment(ANSWER, QUESTION, "claims")


@pytest.mark.unit
def test_evidence_with_nli_relations(bm25s_index, tmp_path):
    from wetqa.evaluation.nli import NLIModel

    nli = NLIModel(str(tiny_bert_dir(tmp_path / "nli", num_labels=3)))
    claims = [Claim("De rechtbank kan het gezag van een ouder beëindigen.", "s"), Claim("zzz onbekend", "s")]
    find_evidence(claims, open_index(bm25s_index), k=2, nli=nli)
    ev = claims[0].evidence
    assert ev and ev[0]["article"] == "Artikel 266" and ev[0]["score"] == 1.0
    assert ev[0]["sentence"].startswith("1. De rechtbank kan een ouder zijn gezag")
    assert ev[0]["relation"] in {"entailment", "contradiction", "no_relation"}
    assert claims[1].evidence == []


@pytest.mark.unit
def test_attribute_cli_resumes_and_records_failures(bm25s_index, tmp_path):
    run = tmp_path / "run-1.jsonl"
    run.write_text(
        json.dumps({"id": "1", "question": QUESTION, "answer": ANSWER})
        + "\n{bad\n"
        + json.dumps({"id": "2", "question": "?", "answer": ""})
        + "\n"
    )
    cmd = [
        sys.executable,
        "-m",
        "wetqa",
        "attribute",
        "--answers",
        str(run),
        "--index",
        str(bm25s_index),
        "--out",
        str(tmp_path / "attr.jsonl"),
        "--output",
        "json",
    ]
    r = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["answers"] == 2 and len(out["problems"]) == 1
    rows = [json.loads(l) for l in (tmp_path / "attr.jsonl").read_text().splitlines()]
    assert rows[0]["attribution"][0]["evidence"][0]["article"] == "Artikel 266" and rows[1]["attribution"] == []
    again = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    assert json.loads(again.stdout)["answers"] == 2 and len((tmp_path / "attr.jsonl").read_text().splitlines()) == 2
    bad = subprocess.run(cmd[:-2] + ["--unit", "claims"], cwd=ROOT, capture_output=True, text=True)
    assert bad.returncode == 2 and "need an LLM" in bad.stderr


def _attribute(answers, index, out, *extra):
    cmd = [sys.executable, "-m", "wetqa", "attribute", "--answers", str(answers), "--index", str(index)]
    return subprocess.run([*cmd, "--out", str(out), *extra], cwd=ROOT, capture_output=True, text=True)


def _one_line_error(r, code: int = 2) -> str:
    lines = r.stderr.strip().splitlines()
    assert r.returncode == code and len(lines) == 1 and "Traceback" not in r.stderr, r.stderr
    return lines[0]


@pytest.mark.unit
def test_attribute_never_writes_over_a_file_it_did_not_write(bm25s_index, tmp_path):
    """Bug: --out naming a user's file (or the answers themselves) was cut to nothing as a "torn" journal and
    filled with evidence, exit 0; a generation run file (records with "error": null) was taken for evidence."""
    import os

    run = tmp_path / "run-1.jsonl"
    run.write_text(json.dumps({"id": "1", "question": QUESTION, "answer": ANSWER}) + "\n")
    mine = {
        "notes.txt": "precious\n",
        "no-newline.txt": "my notes, no final newline",
        "run-2.jsonl": json.dumps({"id": "0", "question": "?", "answer": "", "error": None}) + "\n",
    }
    for name, text in mine.items():
        (tmp_path / name).write_text(text)
        assert "not evidence this wetqa wrote" in _one_line_error(_attribute(run, bm25s_index, tmp_path / name))
        assert (tmp_path / name).read_text() == text
    before = run.read_text()
    assert "--answers" in _one_line_error(_attribute(run, bm25s_index, run))
    os.link(run, tmp_path / "hard.jsonl")
    assert "--answers" in _one_line_error(_attribute(run, bm25s_index, tmp_path / "hard.jsonl"))
    assert run.read_text() == before
    assert "not a file" in _one_line_error(_attribute(run, bm25s_index, tmp_path))


@pytest.mark.unit
def test_attribute_refuses_evidence_made_with_other_inputs(bm25s_index, tmp_path):
    """Bug: resuming into evidence found with another index or k reported it as done, exit 0."""
    run = tmp_path / "run-1.jsonl"
    run.write_text("".join(json.dumps({"id": i, "question": QUESTION, "answer": ANSWER}) + "\n" for i in "12"))
    out = tmp_path / "attr.jsonl"
    assert _attribute(run, bm25s_index, out, "-k", "3").returncode == 0
    made = out.read_text()
    assert "other inputs (k changed)" in _one_line_error(_attribute(run, bm25s_index, out, "-k", "1"))
    assert out.read_text() == made
    # --force empties it only once everything has loaded: a model that is not there leaves it whole.
    missing = _attribute(run, bm25s_index, out, "-k", "1", "--force", "--nli-model", str(tmp_path / "none"))
    assert "NLI model not found" in _one_line_error(missing, 3)  # a missing component
    assert out.read_text() == made
    again = _attribute(run, bm25s_index, out, "-k", "1", "--force")
    assert again.returncode == 0, again.stderr
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["id"] for r in rows] == ["1", "2"] and rows[0]["attribution"][0]["evidence"]  # started again
    # A record torn by an interruption is cut off and that answer attributed again.
    with open(run, "a") as fh:  # a third answer, whose record the interruption tore
        fh.write(json.dumps({"id": "3", "question": QUESTION, "answer": ANSWER}) + "\n")
    with open(out, "a") as fh:
        fh.write('{"id": "3", "quest')
    resumed = _attribute(run, bm25s_index, out, "-k", "1")
    assert resumed.returncode == 0, resumed.stderr
    assert [json.loads(line)["id"] for line in out.read_text().splitlines()] == ["1", "2", "3"]
    # Evidence replaced by a file of the user's under its name is not wetqa's any more, --force or not.
    out.write_text("mine\n")
    for extra in ((), ("--force",)):
        assert "not evidence this wetqa wrote" in _one_line_error(_attribute(run, bm25s_index, out, "-k", "1", *extra))
    assert out.read_text() == "mine\n"


@pytest.mark.unit
def test_evidence_is_locked_and_checked_again_before_it_is_written(bm25s_index, tmp_path):
    """Review: the file was checked, then cut or emptied minutes later (after the models loaded) without a
    second look, and two runs into one file cut each other's records."""
    import fcntl

    from wetqa.evaluation.claims import EvidenceFile
    from wetqa.io import OutputError

    run = tmp_path / "run-1.jsonl"
    run.write_text("".join(json.dumps({"id": i, "question": QUESTION, "answer": ANSWER}) + "\n" for i in "12"))
    out = tmp_path / "attr.jsonl"
    assert _attribute(run, bm25s_index, out).returncode == 0
    made = out.read_text()
    # A record written whole just before an interruption, its count beside the file not yet updated: resumed.
    with open(run, "a") as fh:
        fh.write(json.dumps({"id": "3", "question": QUESTION, "answer": ANSWER}) + "\n")
    third = json.dumps({"id": "3", "question": QUESTION, "answer": ANSWER, "attribution": []}) + "\n"
    out.write_text(made + third)
    assert _attribute(run, bm25s_index, out).returncode == 0
    assert [json.loads(line)["id"] for line in out.read_text().splitlines()] == ["1", "2", "3"]
    # Another run holds the file: refused, nothing written.
    with open(out, "ab") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        before = out.read_text()
        assert "being written by another wetqa attribute" in _one_line_error(_attribute(run, bm25s_index, out))
        assert out.read_text() == before
    # Changed between the check and the writing (while the models loaded): nothing cut, nothing written.
    inputs = json.loads((tmp_path / ".attr.jsonl.wetqa.json").read_text())["inputs"]
    evidence = EvidenceFile(out, inputs)
    out.write_text("mine\n")
    with pytest.raises(OutputError, match="changed while the models loaded"):
        evidence.open()
    assert out.read_text() == "mine\n"


@pytest.mark.unit
def test_attribute_without_one_answer_is_an_error(bm25s_index, tmp_path):
    """Bug: a run file of no readable answer gave an empty evidence file and exit 0."""
    bad = tmp_path / "bad.jsonl"
    bad.write_text("garbage\n")
    assert "no answer" in _one_line_error(_attribute(bad, bm25s_index, tmp_path / "a.jsonl"))
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    assert "no answer" in _one_line_error(_attribute(empty, bm25s_index, tmp_path / "a.jsonl"))
    assert not (tmp_path / "a.jsonl").exists()


@pytest.mark.integration
def test_claim_prompts_against_smollm2():
    """One run against a real small local model: whatever it says, the pipeline copes."""
    from wetqa.evaluation.llm import make_completer

    # 30 tokens hold the JSON each prompt asks for; what runs past it is cut, as the parsers expect of a
    # model (60 tokens doubled the test's time: generation is most of it).
    complete = make_completer("transformers:" + smollm2_gguf(), max_tokens=30)
    claims = segment(ANSWER, QUESTION, "claims", complete)
    assert claims and all(isinstance(c.text, str) and c.text for c in claims)
    classify(claims[:2], QUESTION, ANSWER, complete)
    assert all(c.worthiness in {"factual", "opinion", "not_a_claim", "other"} for c in claims[:2])
    assert all(isinstance(c.independent, bool) for c in claims[:2])
