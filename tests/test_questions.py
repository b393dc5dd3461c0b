"""The questions each article answers: the question set, its writer (`wetqa questions write`) and the index's
questions view."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from wetqa.generation.questions import parse, write_questions
from wetqa.retrieval.questions import (
    ArticleQuestions,
    QuestionSet,
    asked_in,
    checked,
    near_copies,
    question_problem,
    text_hash,
)

from .conftest import ROOT

pytestmark = pytest.mark.unit


def test_a_question_that_begins_with_geen_is_a_question_not_a_skip():
    """Only the skip form ``GEEN: reden`` says an article has no questions (review finding 9)."""
    assert parse("Geen vakantiegeld gekregen, mag dat?\nKrijg ik vakantiegeld?") == (
        ["Geen vakantiegeld gekregen, mag dat?", "Krijg ik vakantiegeld?"],
        "",
    )
    assert parse("GEEN: alleen definities") == ([], "definities")
    assert parse("geen : vervallen artikel") == ([], "vervallen")
    # A writer that drops the colon still says GEEN (second review, finding 8); a question stays a question.
    assert parse("GEEN")[1] == "technisch" and parse("GEEN - vervallen artikel") == ([], "vervallen")
    assert parse("Geen werk, mag mijn baas me ontslaan?")[0] == ["Geen werk, mag mijn baas me ontslaan?"]


def test_a_model_answer_is_parsed_leniently():
    text = (
        "Hier zijn drie vragen:\n1. Mag mijn baas mij op zondag laten werken?\n- mag dat zomaar?\n"
        '"Hoeveel uur mag ik per dag werken?" En hoe zit het met pauzes?\nEen regel zonder vraag.'
    )
    questions, skip = parse(text)
    assert skip == ""
    assert questions == [
        "Mag mijn baas mij op zondag laten werken?",
        "mag dat zomaar?",
        "Hoeveel uur mag ik per dag werken?",
        "En hoe zit het met pauzes?",
    ]
    assert parse("GEEN: dit artikel bevat alleen definities") == ([], "definities")
    assert parse("geen: wijzigt een andere wet")[1] == "wijzigingsbepaling"
    assert parse("GEEN: weet ik niet")[1] == "technisch"


def test_a_written_question_is_checked():
    assert question_problem("Mag mijn baas mij op zondag laten werken?") is None
    assert "question mark" in question_problem("Mag mijn baas mij op zondag laten werken")
    assert "article number" in question_problem("Wat zegt artikel 5 over zondagswerk eigenlijk?")
    assert "article number" in question_problem("Wanneer geldt 7:610 voor mij als werknemer?")
    assert "words" in question_problem("Mag dat?")
    assert "Dutch" in question_problem("What does the law say about working on Sunday?")
    kept, dropped = checked(["Mag mijn baas dat zomaar doen?", "mag mijn baas dat zomaar doen?", "Kort?"])
    assert kept == ["Mag mijn baas dat zomaar doen?"] and len(dropped) == 2
    assert any("duplicate" in d for d in dropped)


def _row(law="BWBR9990001", article="Artikel 1", text="De tekst.", questions=("Mag ik dat zomaar doen?",), **kw):
    return ArticleQuestions(law, article, "2024-01-01", text_hash(text), tuple(questions), **kw)


def test_a_question_set_round_trips_compressed_and_keys_by_text(tmp_path):
    rows = [_row(), _row(article="Artikel 2", questions=(), skip="definities"), _row(article="")]
    qset = QuestionSet(rows)
    path = qset.write(tmp_path / "set.jsonl.gz")
    assert path.read_bytes()[:2] == b"\x1f\x8b"
    again = QuestionSet.load(path)
    assert [r.to_json() for r in again.rows] == [r.to_json() for r in rows]
    # The same content compresses to the same bytes (its hash is part of a run's identity).
    assert qset.write(tmp_path / "again.jsonl.gz").read_bytes() == path.read_bytes()
    assert again.get("BWBR9990001", "Artikel  1", "De tekst.").questions == ("Mag ik dat zomaar doen?",)
    assert again.get("BWBR9990001", "Artikel 1", "Een andere tekst.") is None  # a changed article: not its questions
    assert again.of_laws() == {"BWBR9990001": ["Mag ik dat zomaar doen?"]}
    # A later row of the same article and text replaces the earlier (a writing run appends).
    newer = QuestionSet([_row(), _row(questions=("Moet ik dat melden bij de gemeente?",))])
    assert len(newer.rows) == 1 and newer.rows[0].questions == ("Moet ik dat melden bij de gemeente?",)
    assert newer.digest != QuestionSet([_row()]).digest


def test_a_question_set_that_is_not_one_is_one_line(tmp_path):
    from wetqa.retrieval._base import RetrievalError

    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"law_id": "BWBR1", "text_hash": "ab"}\n', encoding="utf-8")
    with pytest.raises(RetrievalError, match="neither questions nor a skip"):
        QuestionSet.load(bad)
    bad.write_text("not json\n", encoding="utf-8")
    with pytest.raises(RetrievalError, match=r"bad.jsonl:1: not a JSON line"):
        QuestionSet.load(bad)
    bad.write_bytes(b"\x1f\x8b\x08 broken")
    with pytest.raises(RetrievalError, match="not a readable gzip"):
        QuestionSet.load(bad)


def test_the_writers_round_is_packed_checked_and_deduplicated(tmp_path):
    folder = tmp_path / "round"
    (folder / "out").mkdir(parents=True)
    keys = {
        "a00001": {"law_id": "BWBR1", "article": "Artikel 1", "version_date": "2024-01-01", "text_hash": "0" * 64, "law": "Wet A"},
        "a00002": {"law_id": "BWBR1", "article": "Artikel 2", "version_date": "2024-01-01", "text_hash": "1" * 64, "law": "Wet A"},
        "a00003": {"law_id": "BWBR1", "article": "Artikel 3", "version_date": "2024-01-01", "text_hash": "2" * 64, "law": "Wet A"},
    }  # fmt: skip
    (folder / "keys.json").write_text(json.dumps(keys), encoding="utf-8")
    (folder / "skipped_auto.json").write_text(
        json.dumps([{"law_id": "BWBR1", "article": "Artikel 4", "version_date": "2024-01-01", "text_hash": "3" * 64,
                     "law": "Wet A", "skip": "citeertitel"}]), encoding="utf-8")  # fmt: skip
    lines = [
        {"id": "a00001", "questions": ["Mag mijn baas mij ontslaan als ik ziek ben?", "Wat staat er in artikel 7 hierover?",
                                       "Hoe lang krijg ik loon door als ik ziek ben?"]},
        {"id": "a00002", "questions": ["Hoe lang krijg ik loon door als ik ziek ben?", "Moet ik me ziek melden bij mijn baas?"]},
        {"id": "a00003", "skip": "definities"},
    ]  # fmt: skip
    (folder / "out" / "b001.jsonl").write_text("\n".join(json.dumps(x) for x in lines) + "\n", encoding="utf-8")
    out = tmp_path / "set.jsonl.gz"
    unrelated = tmp_path / "eval.jsonl"  # the evaluation questions it is decontaminated against (none near)
    unrelated.write_text(json.dumps({"id": "e1", "question": "Wat is de erfbelasting bij een schenking?",
                                     "gold": [{"law_id": "BWBR2", "article": "Artikel 9"}]}) + "\n")  # fmt: skip
    run = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "pack_questions.py"), str(folder), "--out", str(out),
         "--against", str(unrelated)],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    summary = json.loads(run.stdout)
    qset = QuestionSet.load(out)
    first = qset.get("BWBR1", "Artikel 1", hashed="0" * 16)
    # The article number is dropped, and so is the question written for two articles (from both).
    assert first.questions == ("Mag mijn baas mij ontslaan als ik ziek ben?",)
    assert qset.get("BWBR1", "Artikel 2", hashed="1" * 16).questions == ("Moet ik me ziek melden bij mijn baas?",)
    assert qset.get("BWBR1", "Artikel 3", hashed="2" * 16).skip == "definities"
    assert qset.get("BWBR1", "Artikel 4", hashed="3" * 16).skip == "citeertitel"
    assert summary["questions"] == 2 and summary["skips"] == {"definities": 1, "citeertitel": 1}
    assert summary["dropped"]["written for two articles"] == 2


def test_a_later_rounds_questions_are_added_to_each_articles_own(tmp_path):
    folder = tmp_path / "round"
    (folder / "out").mkdir(parents=True)
    keys = {f"a0000{i}": {"law_id": "BWBR1", "article": f"Artikel {i}", "version_date": "2024-01-01",
                          "text_hash": str(i) * 64, "law": "Wet A"} for i in (1, 2)}  # fmt: skip
    (folder / "keys.json").write_text(json.dumps(keys), encoding="utf-8")
    (folder / "skipped_auto.json").write_text("[]", encoding="utf-8")
    first = [
        {"id": "a00001", "questions": ["Mag mijn baas mij ontslaan als ik ziek ben?"]},
        {"id": "a00002", "skip": "definities"},
    ]
    (folder / "out" / "b001.jsonl").write_text("\n".join(json.dumps(x) for x in first) + "\n", encoding="utf-8")
    more = tmp_path / "round2"
    more.mkdir()
    later = [
        {
            "id": "a00001",
            "questions": [
                "Mag mijn baas mij ontslaan als ik ziek ben ?",  # its own again: once
                "Kan ik zomaar op straat staan als ik lang ziek thuis zit?",
            ],
        },
        {"id": "a00002", "questions": ["Wat betekent werknemer eigenlijk in deze wet?"]},
    ]  # a skip stays one
    (more / "c001.jsonl").write_text("\n".join(json.dumps(x) for x in later) + "\n", encoding="utf-8")
    out = tmp_path / "set.jsonl.gz"
    unrelated = tmp_path / "eval.jsonl"
    unrelated.write_text(json.dumps({"id": "e1", "question": "Wat is de erfbelasting bij een schenking?",
                                     "gold": [{"law_id": "BWBR2", "article": "Artikel 9"}]}) + "\n")  # fmt: skip
    run = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "pack_questions.py"), str(folder), "--out", str(out),
         "--against", str(unrelated), "--more", str(more)],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    qset = QuestionSet.load(out)
    row = qset.get("BWBR1", "Artikel 1", hashed="1" * 16)
    assert row.questions == ("Mag mijn baas mij ontslaan als ik ziek ben?",
                             "Kan ik zomaar op straat staan als ik lang ziek thuis zit?")  # fmt: skip
    assert row.writer == "helper:b001+c001"
    assert qset.get("BWBR1", "Artikel 2", hashed="2" * 16).skip == "definities"
    assert json.loads(run.stdout)["added_by_later_rounds"] == 1  # its own question again is not added
    missing = subprocess.run([sys.executable, str(ROOT / "scripts" / "pack_questions.py"), str(folder), "--out",
                              str(out), "--against", str(unrelated), "--more", str(tmp_path / "absent")],
                             capture_output=True, text=True)  # fmt: skip
    assert missing.returncode != 0 and "--more" in missing.stderr and "Traceback" not in missing.stderr


def test_a_near_copy_of_an_evaluation_question_is_found_by_its_words():
    asked = ["Hoe lang krijg ik loon door als ik ziek ben?", "Mag de huisbaas zomaar de huur verhogen?"]
    written = [
        "Hoe lang krijg ik mijn loon door als ik ziek ben?",  # one word added: Jaccard 9/10
        "Hoeveel vakantiedagen heb ik per jaar?",  # shares a word or two, not the question
        "Mag mijn huisbaas de huur zomaar verhogen?",  # the same words in another order: 7/8
    ]
    found = near_copies(written, asked, 0.6)
    assert sorted(found) == [0, 2]
    assert found[0][0] == 0 and found[2][0] == 1 and found[0][1] == pytest.approx(0.9)
    assert near_copies(written, asked, 0.95) == {}
    # A conversation's earlier user turns are asked questions too (the last turn is its question).
    items = [type("Item", (), {"question": "En als ik parttime werk?",
                               "messages": [{"role": "user", "content": "Hoeveel vakantiedagen heb ik?"},
                                            {"role": "assistant", "content": "Vier keer ..."},
                                            {"role": "user", "content": "En als ik parttime werk?"}]})()]  # fmt: skip
    assert sorted(asked_in(items)) == ["En als ik parttime werk?", "Hoeveel vakantiedagen heb ik?"]


def test_packing_drops_near_copies_of_the_evaluation_questions(tmp_path):
    folder = tmp_path / "round"
    (folder / "out").mkdir(parents=True)
    keys = {"a00001": {"law_id": "BWBR1", "article": "Artikel 1", "version_date": "2024-01-01",
                       "text_hash": "0" * 64, "law": "Wet A"}}  # fmt: skip
    (folder / "keys.json").write_text(json.dumps(keys), encoding="utf-8")
    line = {"id": "a00001", "questions": ["Hoe lang krijg ik mijn loon door als ik ziek ben?",
                                          "Moet ik me ziek melden bij mijn baas?"]}  # fmt: skip
    (folder / "skipped_auto.json").write_text("[]", encoding="utf-8")
    (folder / "out" / "b001.jsonl").write_text(json.dumps(line) + "\n", encoding="utf-8")
    evaluation = tmp_path / "eval.jsonl"
    evaluation.write_text(json.dumps({"id": "q1", "question": "Hoe lang krijg ik loon door als ik ziek ben?",
                                      "gold": [{"law_id": "BWBR1", "article": "Artikel 1"}]}) + "\n")  # fmt: skip
    out = tmp_path / "set.jsonl.gz"
    run = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "pack_questions.py"), str(folder), "--out", str(out),
         "--against", str(evaluation)],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    summary = json.loads(run.stdout)
    assert QuestionSet.load(out).get("BWBR1", "Artikel 1", hashed="0" * 16).questions == (
        "Moet ik me ziek melden bij mijn baas?",
    )
    assert summary["near_copies_by_evaluation_set"] == {"eval": 1}


# ------------------------------------------------------------------------------------------ the writer
@pytest.fixture(scope="module")
def tiny_writer(tmp_path_factory):
    """The transformers backend over a tiny random Llama built here: a real model call (its questions are
    noise: the plumbing is what is tested; tests/test_vllm.py drives a real instruct model)."""
    pytest.importorskip("transformers")
    from wetqa.generation import make_backend, resolve_generator

    from .tiny_models import tiny_llama_dir

    model = tiny_llama_dir(tmp_path_factory.mktemp("llama") / "llama")
    return make_backend(resolve_generator("transformers", model=str(model), max_tokens=12))


class ScriptedWriter:
    """A writer whose answers are fixed (the tiny random model's are noise, which no check passes): the journal,
    the keys and the resumption are what these tests are about; tiny_writer drives a real model call."""

    name = model_name = "scripted"
    supports = frozenset({"temperature", "max_tokens"})
    structured = False
    uses_model = True
    inline_safe = False
    schedules = False

    def generate(self, requests):
        from wetqa.generation import Generation

        return [
            Generation("1. Mag mijn baas dat zomaar doen?\n2. Moet ik dat melden bij de gemeente?") for _ in requests
        ]

    def refuse(self, sampling):
        return None

    def close(self):
        return None


def test_a_real_models_questions_are_journaled_or_asked_again(tiny_writer, fixture_corpus, tmp_path):
    """Through a real model call: each article is written, skipped (GEEN: reden) or failed; a failed one (no
    question passed the checks) is not journaled, so the next run asks again (review finding 9)."""
    out = tmp_path / "questions.jsonl"
    first = write_questions(fixture_corpus, out, tiny_writer, limit=2, progress=False, max_tokens=12)
    assert first["written"] + first["skipped"] + first["failed"] == 2
    journaled = out.read_text(encoding="utf-8").splitlines() if out.exists() else []
    assert len(journaled) == first["written"] + first["skipped"]
    second = write_questions(fixture_corpus, out, tiny_writer, limit=2, progress=False, max_tokens=12)
    assert second["done_before"] == len(journaled)


def test_writing_resumes_and_keys_each_article_by_its_text(fixture_corpus, tmp_path):
    tiny_writer = ScriptedWriter()
    out = tmp_path / "questions.jsonl"
    first = write_questions(fixture_corpus, out, tiny_writer, limit=2, progress=False, max_tokens=12)
    assert first["failed"] == 0 and first["written"] + first["skipped"] == 2
    rows = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]
    assert len(rows) == 2 and all(r["writer"] and r["text_hash"] and r["version_date"] for r in rows)
    # A torn last line (a killed run) is cut off, and the run goes on where it stopped.
    with open(out, "a", encoding="utf-8") as fh:
        fh.write('{"law_id": "BWBR99')
    second = write_questions(fixture_corpus, out, tiny_writer, limit=2, progress=False, max_tokens=12)
    assert second["done_before"] == 2
    keys = [(r["law_id"], r["article"], r["text_hash"]) for r in map(json.loads, out.read_text().splitlines())]
    assert len(keys) == 4 == len(set(keys))


def test_a_changed_article_gets_new_questions(fixture_corpus, tmp_path):
    import shutil

    tiny_writer = ScriptedWriter()
    corpus = tmp_path / "corpus"
    shutil.copytree(fixture_corpus, corpus)
    out = tmp_path / "questions.jsonl"
    laws = ["BWBR9990001"]
    write_questions(corpus, out, tiny_writer, laws=laws, progress=False, max_tokens=12)
    before = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]
    # One article's text changes: it alone is written again; the others keep theirs.
    articles = corpus / "articles.jsonl"
    lines = articles.read_text(encoding="utf-8").splitlines()
    for i, line in enumerate(lines):
        rec = json.loads(line)
        if rec["law_id"] == "BWBR9990001" and not rec["expired"] and rec["article"] == before[0]["article"]:
            rec["text"] += " Gewijzigd."
            rec["paragraphs"][-1] += " Gewijzigd."
            lines[i] = json.dumps(rec, ensure_ascii=False)
    articles.write_text("\n".join(lines) + "\n", encoding="utf-8")
    again = write_questions(corpus, out, tiny_writer, laws=laws, progress=False, max_tokens=12)
    assert again["written"] + again["skipped"] == 1 and again["done_before"] == len(before) - 1


def test_the_writer_refuses_what_is_not_its_own(tiny_writer, fixture_corpus, tmp_path):
    from wetqa.generation._base import GenerationError
    from wetqa.generation.backends.extractive import ExtractiveBackend

    notes = tmp_path / "notes.jsonl"
    notes.write_text('{"mine": 1}\n', encoding="utf-8")
    with pytest.raises(GenerationError, match="not a question set"):
        write_questions(fixture_corpus, notes, tiny_writer, progress=False)
    assert notes.read_text(encoding="utf-8") == '{"mine": 1}\n'
    # Nothing of a file that is not its own is cut or appended to (review finding 1): a dataset without its last
    # newline, a text file, a compressed question set (wetqa appends only to plain JSON lines).
    dataset = tmp_path / "dev.jsonl"
    dataset.write_text('{"id": "q1", "question": "Wat?"}\n{"id": "q2", "question": "Waarom?"}', encoding="utf-8")
    text = tmp_path / "notes.txt"
    text.write_text("boodschappen\nmelk", encoding="utf-8")
    compressed = QuestionSet([_row()]).write(tmp_path / "mine.jsonl.gz")
    for path in (dataset, text, compressed):
        before = path.read_bytes()
        with pytest.raises(GenerationError, match="not a question set|compressed"):
            write_questions(fixture_corpus, path, tiny_writer, progress=False)
        assert path.read_bytes() == before, path
    # A set of one's own whose last row lost its newline keeps that row (second review, finding 6).
    from wetqa.generation.questions import _done

    rows = [_row(article="Artikel 1").to_json(), _row(article="Artikel 2").to_json()]
    mine = tmp_path / "mine.jsonl"
    mine.write_text(json.dumps(rows[0]) + "\n" + json.dumps(rows[1]), encoding="utf-8")
    assert len(_done(mine)) == 2
    assert [json.loads(line) for line in mine.read_text(encoding="utf-8").splitlines()] == rows
    with pytest.raises(GenerationError, match="needs a language model"):
        write_questions(fixture_corpus, tmp_path / "q.jsonl", ExtractiveBackend(), progress=False)
    with pytest.raises(GenerationError, match="no article in force of BWBR0000000"):
        write_questions(fixture_corpus, tmp_path / "q.jsonl", tiny_writer, laws=["BWBR0000000"], progress=False)


def test_the_cli_refuses_bad_input_in_one_line(fixture_corpus, tmp_path):
    def wetqa(*argv):
        return subprocess.run([sys.executable, "-m", "wetqa", *argv], capture_output=True, text=True)

    run = wetqa("questions", "write", "--corpus", str(fixture_corpus), "--out", str(tmp_path / "q.jsonl"))
    assert run.returncode == 2 and "--generator" in run.stderr
    run = wetqa("questions", "check", str(tmp_path / "missing.jsonl"))
    assert run.returncode == 2 and run.stderr.count("\n") == 1 and "not found" in run.stderr
    good = QuestionSet([_row(questions=("Mag mijn baas mij verbieden te staken?", "Wat staat in artikel 3?")),
                        _row(article="", questions=("Waar regelt deze wet het stakingsrecht?",))])  # fmt: skip
    path = good.write(tmp_path / "set.jsonl.gz")
    run = wetqa("questions", "check", str(path), "--output", "json")
    assert run.returncode == 1, run.stderr
    summary = json.loads(run.stdout)
    assert summary["problems"] == {"names an article number": 1}
    # Articles and whole regulations are counted apart; the file's hash and the content's digest are named apart.
    assert (summary["articles"], summary["whole_regulations"]) == (1, 1)
    assert summary["file_sha256"] == __import__("hashlib").sha256(path.read_bytes()).hexdigest()[:16]
    assert summary["content_digest"] == good.digest[:16] != summary["file_sha256"]
    run = wetqa("questions", "show", "BWBR9990001", "1", "--set", str(path))
    assert run.returncode == 0 and "Mag mijn baas mij verbieden te staken?" in run.stdout


# ---------------------------------------------------------------------------------- the questions view
def _fixture_set(corpus: Path, per_article: dict[str, list[str]]) -> QuestionSet:
    rows = []
    for line in (corpus / "articles.jsonl").read_text(encoding="utf-8").splitlines():
        rec = json.loads(line)
        key = f"{rec['law_id']}|{rec['article']}"
        if key in per_article and not rec["expired"]:
            rows.append(ArticleQuestions(rec["law_id"], rec["article"], rec["version_date"], text_hash(rec["text"]),
                                         tuple(per_article[key]), writer="test"))  # fmt: skip
    return QuestionSet(rows)


def _first_articles(corpus: Path, n: int) -> list[dict]:
    recs = [json.loads(line) for line in (corpus / "articles.jsonl").read_text(encoding="utf-8").splitlines()]
    return [r for r in recs if not r["expired"] and r["text"].strip()][:n]


def test_the_index_reads_each_articles_questions(fixture_corpus, tmp_path):
    from wetqa.retrieval import build_index
    from wetqa.retrieval.articles.questions_view import QuestionsView
    from wetqa.retrieval.engines.index import load_index, read_index_meta

    a, b = _first_articles(fixture_corpus, 2)
    qset = _fixture_set(fixture_corpus, {
        f"{a['law_id']}|{a['article']}": ["Mag mijn huisbaas de borg zomaar houden?", "Krijg ik mijn borg terug?"],
        f"{b['law_id']}|{b['article']}": ["Hoeveel vakantiedagen krijg ik van mijn baas?"],
    })  # fmt: skip
    path = qset.write(tmp_path / "set.jsonl")
    index = tmp_path / "index"
    meta = build_index(fixture_corpus, "articles", index, progress=False, questions=str(path))
    assert meta["questions"]["questions"] == 3 and meta["questions"]["articles_by_text"] == 2
    loaded = load_index(index)
    view = QuestionsView.load(index, loaded)
    assert view is not None and len(view) == 3
    # "borg" and "huisbaas" are words of the questions, not of the corpus: found through them.
    best, second = view.by_article(view.bm25("mijn huisbaas houdt de borg"))
    top = view.top_articles(best, 5)
    chunk = loaded.chunks.rows([int(loaded.first[top[0]])])[0]
    assert (chunk.law_id, chunk.article) == (a["law_id"], a["article"])
    assert np.isfinite(second[top[0]])  # the article's second question scored too
    # A rebuild with the same set is up to date; another set rebuilds; none leaves the view out.
    assert not build_index(fixture_corpus, "articles", index, progress=False, questions=str(path))["rebuilt"]
    assert read_index_meta(index)["questions"]["set"] == qset.digest[:16]
    none = build_index(fixture_corpus, "articles", tmp_path / "plain", progress=False, questions="none")
    assert none["questions"] is None and QuestionsView.load(tmp_path / "plain", load_index(tmp_path / "plain")) is None


def test_an_older_versions_questions_are_read_when_the_text_changed(fixture_corpus, tmp_path):
    from wetqa.retrieval import build_index

    (a,) = _first_articles(fixture_corpus, 1)
    row = ArticleQuestions(a["law_id"], a["article"], "2000-01-01", text_hash("an older text"),
                           ("Mag mijn huisbaas de borg zomaar houden?",), writer="test")  # fmt: skip
    path = QuestionSet([row]).write(tmp_path / "set.jsonl")
    meta = build_index(fixture_corpus, "articles", tmp_path / "index", progress=False, questions=str(path))
    assert meta["questions"]["articles_by_label"] == 1 and meta["questions"]["articles_by_text"] == 0


def test_an_article_found_only_by_its_questions_is_a_candidate_with_their_features(fixture_corpus, tmp_path):
    from wetqa.retrieval import build_index
    from wetqa.retrieval.articles.candidates import CandidateFeatures
    from wetqa.retrieval.articles.questions_view import QuestionsView
    from wetqa.retrieval.engines.index import load_index

    a, b = _first_articles(fixture_corpus, 2)
    qset = _fixture_set(fixture_corpus, {f"{b['law_id']}|{b['article']}": ["Mag mijn huisbaas de borg zomaar houden?"]})
    build_index(
        fixture_corpus, "articles", tmp_path / "index", progress=False, questions=str(qset.write(tmp_path / "s.jsonl"))
    )
    index = load_index(tmp_path / "index")
    plain = CandidateFeatures(index)
    asked = CandidateFeatures(index, questions=QuestionsView.load(tmp_path / "index", index))
    question = "Mag de huisbaas mijn borg houden?"  # no word of it is in the fixture laws
    assert not len(plain.candidates(question, None, None).articles)
    c = asked.candidates(question, None, None)
    assert len(c.articles) >= 1
    first = index.chunks.rows([int(index.first[c.articles[0]])])[0]
    assert (first.law_id, first.article) == (b["law_id"], b["article"])
    assert c.values["qbm"][0] == 1.0 and c.raw["qbm"][0] == 1.0  # its question is the best of all


def test_a_questions_ranking_model_is_read_only_beside_its_confidence_model(fixture_corpus, tmp_path, monkeypatch,
                                                                           caplog):  # fmt: skip
    """A ranking model fitted with the questions view but no confidence model for it turned abstention off (every
    question answered at confidence 1; review finding 5): the view is read only when both were fitted."""
    import logging

    from wetqa.retrieval import RetrievalSpec, build_index
    from wetqa.retrieval.articles import candidates
    from wetqa.retrieval.ranking import confidence

    (a,) = _first_articles(fixture_corpus, 1)
    qset = _fixture_set(fixture_corpus, {f"{a['law_id']}|{a['article']}": ["Mag mijn huisbaas de borg zomaar houden?"]})
    index = tmp_path / "index"
    build_index(fixture_corpus, "articles", index, progress=False, questions=str(qset.write(tmp_path / "s.jsonl")))
    ranking = dict(candidates.shipped_models())
    ranking["articles+questions"] = candidates.RankingModel(ranking["articles"].spec, "articles+questions")
    monkeypatch.setattr(candidates, "shipped_models", lambda: ranking)
    spec = RetrievalSpec(index=(str(index),), rescore="none", reader="none")
    with caplog.at_level(logging.WARNING, logger="wetqa.retrieval"):
        assert spec.build().key == "articles"
    assert "no confidence model is fitted for articles+questions" in caplog.text
    # `fit confidence` builds the pipelines it fits a confidence for: there the ranking model is read alone.
    from wetqa.retrieval.articles.stage_list import FITTING_CONFIDENCE

    fitting = FITTING_CONFIDENCE.set(True)
    try:
        assert spec.build().key == "articles+questions"
    finally:
        FITTING_CONFIDENCE.reset(fitting)
    fitted = dict(confidence.shipped_models())
    fitted["articles+questions"] = fitted["articles"]
    monkeypatch.setattr(confidence, "shipped_models", lambda: fitted)
    assert spec.build().key == "articles+questions"


def test_packing_vectors_of_a_set_that_is_not_there_is_one_line(tmp_path):
    run = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "pack_reader_vectors.py"), "--questions", str(tmp_path / "none.jsonl"),
         "--out", str(tmp_path / "p.npz")],
        capture_output=True, text=True,
    )  # fmt: skip
    assert run.returncode == 2 and run.stderr.count("\n") == 1 and "not found" in run.stderr
    assert not (tmp_path / "p.npz").exists()
