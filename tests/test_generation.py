import json
import re
import subprocess
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from wetqa.corpus.records import Chunk
from wetqa.generation import (
    BackendBase,
    GenerationError,
    Pipeline,
    build_messages,
    make_backend,
    parse_output,
    resolve_generator,
)
from wetqa.generation.backends.extractive import ExtractiveBackend
from wetqa.generation.runs import generate_runs, read_done
from wetqa.retrieval import Hit, open_index

from .conftest import ROOT
from .tiny_models import tiny_llama_dir

IDS = ["DOC0226", "DOC0227", "DOC12988"]


def _chunk(doc_id, article, text, part=1, bwb="BWBR9990001"):
    return Chunk(
        id=f"{bwb}_x_{article}_{part}",
        doc_id=doc_id,
        law_id=bwb,
        version_date="2024-01-01",
        law="Wet X",
        article=f"Artikel {article}",
        part=part,
        text=text,
    )


# ---------------------------------------------------------------- parser
EXAMPLES = [
    ("ANSWER: Het gezag eindigt.\nDOC IDS: DOC0226, DOC0227", "Het gezag eindigt.", ["DOC0226", "DOC0227"], [], True),
    ("**Antwoord:** Ja.\n\n**DOC IDs:** [226], [12988], [999]", "Ja.", ["DOC0226", "DOC12988"], ["DOC0999"], True),
    ("Answer: x\nDoc-ids: ['DOC0227']\n\nNog meer tekst 226", "x", ["DOC0227"], [], True),
    (
        "ANSWER:\nregel een\nregel twee\nDOC IDS:\n- DOC0226\n- DOC12988",
        "regel een\nregel twee",
        ["DOC0226", "DOC12988"],
        [],
        True,
    ),
    (
        "Zonder opmaak, zie [DOC0226] en DOC 12988.",
        "Zonder opmaak, zie [DOC0226] en DOC 12988.",
        ["DOC0226", "DOC12988"],
        [],
        False,
    ),
    ("ANSWER: iets\nDOC IDS: geen", "iets", [], [], True),
    ("antwoord - kort\ndoc ids - DOC0227, DOC0227", "kort", ["DOC0227"], [], True),
    ("", "", [], [], False),
]


@pytest.mark.unit
@pytest.mark.parametrize("raw,answer,cited,dropped,ok", EXAMPLES)
def test_parser_examples(raw, answer, cited, dropped, ok):
    p = parse_output(raw, IDS)
    assert (p.answer, p.cited, p.dropped, p.format_ok) == (answer, cited, dropped, ok)


_text = st.text(alphabet=st.characters(blacklist_categories=["Cs"], blacklist_characters="\x00"), max_size=200)


@pytest.mark.unit
@settings(max_examples=200, deadline=None)
@given(raw=_text)
def test_parser_never_fails_and_only_returns_retrieved_ids(raw):
    p = parse_output(raw, IDS)
    assert set(p.cited) <= set(IDS)
    assert len(p.cited) == len(set(p.cited))
    assert isinstance(p.answer, str)


# Text built from marker pieces, so that markers, near-markers and odd Unicode case folds ("ſ", "K") occur.
_marker_soup = st.lists(
    st.sampled_from(
        [
            "DOC IDS:",
            " doc-ids -",
            "\n**Bronnen**:",
            "Sources\n",
            " (document id:",
            "doc",
            "ids",
            " id's",
            "Document",
            "bronnen",
            "Sources",
            "ſources",
            "gebruikte",
            " artikelen",
            ":",
            "-",
            "\n",
            " ",
            "*",
            "[",
            "(",
            "#",
            ">",
            "x",
            "é",
            "İ",
            "K",
            "ı",
            "\u0130",
        ]
    ),
    max_size=40,
).map("".join)


@pytest.mark.unit
@settings(max_examples=500, deadline=None)
@given(raw=_marker_soup, start=st.integers(0, 30))
def test_ids_marker_shortcut_finds_what_the_full_search_finds(raw, start):
    from wetqa.generation.parser import _IDS, _find_ids_marker

    start = min(start, len(raw))
    full, fast = _IDS.search(raw, start), _find_ids_marker(raw, start)
    assert (full and full.span()) == (fast and fast.span())


# Answers from an alphabet that cannot spell a marker ("doc", "answer", "bronnen"), with line breaks.
_answer_text = st.text(alphabet="abcefgh éëï0123456789.,;:()\n", max_size=120)


@pytest.mark.unit
@settings(max_examples=300, deadline=None)
@given(
    answer=_answer_text,
    ids=st.lists(st.sampled_from(IDS), max_size=3),
    style=st.sampled_from(["plain", "bold", "brackets", "numbers"]),
    marker=st.sampled_from(["ANSWER:", "**Antwoord:**", "Answer -"]),
)
def test_parser_recovers_what_was_written(answer, ids, style, marker):
    id_text = {
        "plain": ", ".join(ids),
        "bold": ", ".join(f"**{i}**" for i in ids),
        "brackets": " ".join(f"[{i}]" for i in ids),
        "numbers": ", ".join(str(int(i[3:])) for i in ids),
    }[style]
    p = parse_output(f"{marker} {answer}\nDOC IDS: {id_text}", IDS)
    assert p.cited == list(dict.fromkeys(ids))
    assert p.answer == re.sub(r"\n{3,}", "\n\n", answer.strip())
    assert p.format_ok


# ---------------------------------------------------------------- prompt and extractive
@pytest.mark.unit
def test_prompt_has_question_chunks_example_and_format():
    hits = [Hit(_chunk("DOC0226", 266, "De rechtbank kan het gezag beëindigen."), 3.0, 1)]
    nl = build_messages("Wanneer eindigt het gezag?", hits)
    user = nl[1]["content"]
    assert "Vraag: Wanneer eindigt het gezag?" in user and "[DOC0226] Wet X, Artikel 266" in user
    assert "Niet elk artikel is relevant" in user and "ANSWER:" in user and "DOC IDS:" in user and "Voorbeeld" in user
    en = build_messages("When?", hits, language="en")
    assert "Not every article is relevant" in en[1]["content"]
    # The shared instructions come first, so engines can cache the prefix.
    other = build_messages("Iets anders?", hits)[1]["content"]
    assert user.split("Vraag:")[0] == other.split("Vraag:")[0]


@pytest.mark.unit
def test_extractive_is_deterministic_and_cites_what_it_quotes():
    b = ExtractiveBackend()
    hits = [
        Hit(_chunk("DOC0010", 266, "De rechtbank kan het gezag van een ouder beëindigen.", 1), 9.0, 1),
        Hit(_chunk("DOC0099", 5, "Over fietsen op het fietspad."), 8.0, 2),
        Hit(_chunk("DOC0011", 266, "2. Het gezag kan ook worden beëindigd bij schorsing.", 2), 7.0, 3),
    ]
    q = "Wanneer kan de rechtbank het gezag van een ouder beëindigen?"
    out1, out2 = b.answer(q, hits), b.answer(q, hits)
    assert out1 == out2
    p = parse_output(out1, [h.chunk.doc_id for h in hits])
    assert p.cited == ["DOC0010", "DOC0011"]  # the same-article continuation, not the unrelated chunk
    assert "fietspad" not in p.answer and p.answer.startswith("De rechtbank")
    assert parse_output(b.answer(q, []), []).cited == []


# ---------------------------------------------------------------- pipeline, presets, runs
@pytest.mark.unit
def test_pipeline_extractive(bm25s_index):
    p = Pipeline(open_index(bm25s_index), make_backend(resolve_generator("extractive")), k=3)
    a = p.ask("Wanneer kan de rechtbank het gezag van een ouder beëindigen?")
    assert a.citations and a.citations[0].article == "Artikel 266"
    assert a.answer.startswith("1. De rechtbank kan een ouder zijn gezag")
    j = a.to_json()
    assert set(j) >= {"question", "answer", "citations", "retrieved"}
    assert set(j["citations"][0]) == {
        "id",
        "doc_id",
        "collection",
        "law_id",
        "bwb_id",  # the BWB source's own name for the law id, for clients that know it
        "law",
        "article",
        "text",
        "version_date",
        "valid_until",
        "url",
    }
    assert j["citations"][0]["collection"] == "bwb" and j["citations"][0]["bwb_id"] == j["citations"][0]["law_id"]
    # Each citation is dated by its version and links to that version's text.
    assert j["citations"][0]["version_date"] == "2024-01-01" and j["citations"][0]["valid_until"] is None
    assert j["citations"][0]["url"].endswith("&artikel=266&g=2024-01-01&z=2024-01-01")
    with pytest.raises(GenerationError, match="empty question"):
        p.ask("  ")
    # Several at once (what the benchmarks call): the same answers as one by one.
    questions = [
        "Wanneer kan de rechtbank het gezag van een ouder beëindigen?",
        "Wat regelt de wet over griffierechten?",
    ]
    assert [x.to_json() for x in p.ask_many(questions)] == [p.ask(q).to_json() for q in questions]


@pytest.mark.unit
def test_presets_and_bad_generators(monkeypatch):
    gpt = resolve_generator("gpt-4o").settings
    assert gpt.temperature == 0.0 and gpt.max_tokens == 1000
    g = resolve_generator("geitje-7b-ultra").settings
    assert (g.model, g.temperature, g.top_k, g.max_tokens) == ("BramVanroy/GEITje-7B-ultra", 0.2, 50, 5000)
    assert resolve_generator("fietje-2", backend="transformers").kind == "transformers"
    with pytest.raises(GenerationError, match="unknown generator 'gpt-5-turbo-max'"):
        resolve_generator("gpt-5-turbo-max")
    with pytest.raises(GenerationError, match="needs a model"):
        resolve_generator("transformers")
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    with pytest.raises(GenerationError, match="no OpenAI API key"):
        make_backend(resolve_generator("gpt-4o"))


@pytest.mark.unit
def test_unreachable_server_is_recorded_per_question_and_the_run_goes_on(bm25s_index, tmp_path):
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    cfg = resolve_generator("openai", model="m", base_url=f"http://127.0.0.1:{port}/v1", timeout=2.0)
    backend = make_backend(cfg)
    backend._client = backend._client.with_options(max_retries=0)
    p = Pipeline(open_index(bm25s_index), backend, k=2)
    from wetqa.corpus.dataset import QAItem

    items = [QAItem("1", "Wanneer eindigt het gezag?"), QAItem("2", "Wat is rechtmatig verblijf?")]
    summary = generate_runs(p, items, tmp_path / "run", progress=False)
    assert summary["runs"][0]["failed"] == 2
    recs = list(read_done(tmp_path / "run" / "run-1.jsonl").values())
    assert all("cannot reach the model server" in r["error"] for r in recs)
    with pytest.raises(GenerationError, match="cannot reach the model server"):
        p.ask("Wanneer eindigt het gezag?")


@pytest.mark.unit
def test_generate_resumes_without_redoing_finished_questions(bm25s_index, tmp_path):
    from wetqa.corpus.dataset import QAItem

    calls = []

    class Counting(ExtractiveBackend):
        def generate(self, requests):
            calls.extend(r.question for r in requests)
            return super().generate(requests)

    items = [
        QAItem(str(i), q)
        for i, q in enumerate(["Wanneer eindigt het gezag?", "Wat is rechtmatig verblijf?", "Welke tarieven?"])
    ]
    p = Pipeline(open_index(bm25s_index), Counting(), k=2)
    out = tmp_path / "run"
    generate_runs(p, items[:2], out, progress=False)
    # A killed run leaves a torn last line: it is cut off and that question redone.
    with open(out / "run-1.jsonl", "a") as fh:
        fh.write('{"id": "2", "answ')
    calls.clear()
    summary = generate_runs(p, items, out, runs=2, progress=False, batch_size=2)
    assert calls.count("Wanneer eindigt het gezag?") == 1  # only run 2 asked it again
    assert calls.count("Welke tarieven?") == 2
    assert [r["questions"] for r in summary["runs"]] == [3, 3]
    recs = [json.loads(l) for l in (out / "run-1.jsonl").read_text().splitlines()]
    assert sorted(r["id"] for r in recs) == ["0", "1", "2"]
    assert {"prompt", "raw", "answer", "cited_doc_ids", "retrieved", "usage"} <= recs[0].keys()
    cfg = json.loads((out / "config.json").read_text())
    assert cfg["runs"] == 2 and cfg["k"] == 2


@pytest.mark.integration
def test_transformers_backend_with_a_tiny_llama_built_here(bm25s_index, tmp_path):
    model = tiny_llama_dir(tmp_path / "llama")
    cfg = resolve_generator("transformers", model=str(model), max_tokens=12)
    backend = make_backend(cfg)
    p = Pipeline(open_index(bm25s_index), backend, k=2)
    a = p.ask("Wanneer kan de rechtbank het gezag beëindigen?")
    assert a.usage.prompt_tokens > 50 and 0 < a.usage.completion_tokens <= 12
    assert isinstance(a.answer, str)  # random weights: any text, parsed leniently
    # A prompt that cannot fit the window is a clear per-question error.
    backend.context = 40
    with pytest.raises(GenerationError, match="context overflow"):
        p.ask("Wanneer kan de rechtbank het gezag beëindigen?")


@pytest.mark.integration
def test_cli_ask_json_on_the_real_corpus(real_corpus, tmp_path):
    idx = tmp_path / "idx"

    def env_run(*a):
        return subprocess.run([sys.executable, "-m", "wetqa", *a], cwd=ROOT, capture_output=True, text=True)

    r = env_run("index", "--corpus", str(real_corpus), "--retriever", "bm25s", "--out", str(idx), "--no-progress")
    assert r.returncode == 0, r.stderr
    r = env_run(
        "ask", "Wanneer kan de rechter het gezag van een ouder beëindigen?", "--index", str(idx), "--output", "json"
    )
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["citations"] and all(c["law_id"] == "BWBR0002656" for c in out["citations"])
    assert len(out["retrieved"]) == 3
    r = env_run("ask", "x", "--index", str(idx), "--generator", "nope")
    assert r.returncode == 2 and "unknown generator 'nope'" in r.stderr


# ---------------------------------------------------------------- extractive answers from article paragraphs
def _article_hit(paragraphs: list[str], per_chunk: int, expired: bool = False) -> Hit:
    """An article hit whose chunks cut the paragraphs' words into pieces of ``per_chunk`` words (words150-style)."""
    words = "\n".join(paragraphs).split()
    texts = [" ".join(words[i : i + per_chunk]) for i in range(0, len(words), per_chunk)]
    chunks = tuple(
        Chunk(
            f"X_art9_{n}",
            f"DOC{100 + n:04d}",
            "BWBR0000009",
            "2024-01-01",
            "Wet fictief",
            "Artikel 9",
            n,
            t,
            expired=expired,
        )
        for n, t in enumerate(texts, 1)
    )
    return Hit(chunks[0], 1.0, 1, "articles", chunks, tuple(paragraphs))


@pytest.mark.unit
def test_extractive_quotes_the_best_paragraphs_and_cites_exactly_their_chunks():
    from wetqa.generation.backends.extractive import answer_units

    paragraphs = [
        "1. Deze wet regelt de registratie van honden en katten in de gemeente.",
        "2. De burgemeester kan een vergunning intrekken indien:",
        "a. de houder het dier verwaarloost, of",
        "b. de houder de voorschriften van de vergunning overtreedt.",
        "3. Het intrekken geschiedt bij besluit van de burgemeester.",
    ]
    # A list that stands alone belongs to the sentence announcing it.
    assert answer_units(paragraphs)[1] == "\n".join(paragraphs[1:4])
    hit = _article_hit(paragraphs, per_chunk=12)
    b = ExtractiveBackend()
    q = "Wanneer kan de burgemeester een vergunning intrekken?"
    out = b.answer(q, [hit])
    ids = [c.doc_id for c in hit.article_chunks]
    p = parse_output(out, ids)
    assert p.answer.startswith("Wet fictief, Artikel 9:\n2. De burgemeester kan een vergunning intrekken indien:")
    assert "a. de houder het dier verwaarloost" in p.answer and "registratie" not in p.answer
    # Lid 1 is words 0-12; lid 2 with its list is words 13-36: the second to fourth 12-word chunks.
    assert len(ids) == 4 and p.cited == ids[1:4]
    # The pipeline accepts the ids of the article's other chunks as cited sources.
    from wetqa.generation._base import Generation, Request
    from wetqa.generation.pipeline import to_answer

    answer = to_answer(Request(q, [hit], []), Generation(text=out))
    assert [c.doc_id for c in answer.citations] == ids[1:4] and answer.dropped_ids == []


@pytest.mark.unit
def test_extractive_never_quotes_an_expired_article():
    hit = _article_hit(["Vervallen"], per_chunk=5, expired=True)
    p = parse_output(ExtractiveBackend().answer("Wat is vervallen?", [hit]), ["DOC0101"])
    assert p.cited == [] and "Vervallen" not in p.answer


@pytest.mark.unit
def test_half_precision_on_a_gpu_full_on_a_cpu(monkeypatch):
    import torch

    from wetqa.generation.backends.transformers_backend import torch_dtype_for

    assert torch_dtype_for("auto", "cpu") is torch.float32
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: True)
    assert torch_dtype_for("auto", "cuda") is torch.bfloat16
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: False)
    assert torch_dtype_for("auto", "cuda:1") is torch.float16
    assert torch_dtype_for("float16", "cpu") is torch.float16


# ---------------------------------------------------------------- structured answers
HITS = [
    Hit(_chunk("DOC0226", 266, "De rechtbank kan het gezag van een ouder beëindigen.", 1), 9.0, 1),
    Hit(_chunk("DOC0099", 5, "Over fietsen op het fietspad."), 8.0, 2),
    Hit(_chunk("DOC0227", 266, "2. Het gezag kan ook worden beëindigd bij schorsing.", 2), 7.0, 3),
]
QUESTION = "Wanneer kan de rechtbank het gezag van een ouder beëindigen?"


def _json_answer(*sentences) -> str:
    return json.dumps({"answer": [{"sentence": s, "sources": list(ids)} for s, ids in sentences]}, ensure_ascii=False)


class Scripted(BackendBase):
    """A backend that answers every request with the next of a list of outputs (the model's side of a test).

    ``refuse_schema``: a structured request is refused as a server that does not take the schema refuses it.
    """

    name = "scripted"
    structured = True

    def __init__(self, outputs, refuse_schema=False):
        self.outputs, self.refuse_schema = list(outputs), refuse_schema
        self.seen: list = []

    def generate(self, requests):
        return [self._one(r) for r in requests]

    def _one(self, request):
        from wetqa.generation import Generation

        self.seen.append(request)
        if self.refuse_schema and request.schema is not None:
            return Generation(error="the model server refused the answer schema (400)", rejected_schema=True)
        return Generation(text=self.outputs.pop(0))

    def stream(self, request):
        gen = self._one(request)
        if gen.rejected_schema:
            yield gen
            return
        for i in range(0, len(gen.text), 7):  # pieces that cut through keys, strings and escapes
            yield gen.text[i : i + 7]
        yield gen


@pytest.mark.unit
def test_answer_schema_allows_exactly_the_retrieved_ids():
    import jsonschema

    from wetqa.generation.structured import answer_schema, portable, schema_ids

    schema = answer_schema(["DOC0226", "DOC0099", "DOC0226"])
    assert schema_ids(schema) == ["DOC0226", "DOC0099"]  # each id once, in retrieval order
    jsonschema.validate(json.loads(_json_answer(("Ja.", ["DOC0226"]), ("Nee.", ["DOC0099", "DOC0226"]))), schema)
    for bad in (
        _json_answer(("Ja.", ["DOC0999"])),  # never retrieved
        _json_answer(("Ja.", [])),  # a sentence without a source
        _json_answer(("Ja.", ["DOC0226"] * 4)),  # more than ALCE's three
        '{"answer": []}',
        '{"answer": [{"sentence": "Ja.", "sources": ["DOC0226"], "extra": 1}]}',
        _json_answer(("Ja, " * 200, ["DOC0226"])),  # a sentence a looping model never ends
        _json_answer(*[("Ja.", ["DOC0226"])] * 9),
        '{"antwoord": [{"sentence": "Ja.", "sources": ["DOC0226"]}]}',
    ):
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate(json.loads(bad), schema)
    # OpenAI's strict mode refuses string lengths: the API gets the schema without them.
    assert "maxLength" in json.dumps(schema) and "maxLength" not in json.dumps(portable(schema))
    assert schema["x-guidance"] == {"whitespace_flexible": False} and "x-guidance" not in portable(schema)
    assert portable(schema)["properties"]["answer"]["maxItems"] == schema["properties"]["answer"]["maxItems"]
    # Nothing retrieved: sentences without sources are the only valid answer.
    empty = answer_schema([])
    jsonschema.validate(json.loads(_json_answer(("Dat staat niet in de wet.", []))), empty)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(json.loads(_json_answer(("Ja.", ["DOC0226"]))), empty)


_SENTENCE_TEXT = st.text(alphabet=st.characters(blacklist_categories=("Cs",)), min_size=1, max_size=40).filter(
    lambda s: s.strip()
)


@pytest.mark.unit
@settings(max_examples=150, deadline=None)
@given(
    sentences=st.lists(st.tuples(_SENTENCE_TEXT, st.lists(st.sampled_from(IDS), max_size=3)), min_size=1, max_size=5),
    cuts=st.lists(st.integers(min_value=1, max_value=9), min_size=1, max_size=60),
    indent=st.sampled_from([None, 2]),
    ascii_only=st.booleans(),
)
def test_sentence_stream_hands_out_each_sentence_when_its_object_closes(sentences, cuts, indent, ascii_only):
    """Any split of any answer JSON (escapes, braces and quotes in strings, new lines, \\u escapes):
    every sentence comes out exactly once, as soon as its closing brace has arrived, equal to json.loads'."""
    from wetqa.generation.structured import SentenceStream

    obj = {"answer": [{"sentence": s, "sources": ids} for s, ids in sentences]}
    raw = json.dumps(obj, indent=indent, ensure_ascii=ascii_only)
    stream, got, at, k = SentenceStream(), [], 0, 0
    while at < len(raw):
        piece = raw[at : at + cuts[k % len(cuts)]]
        at += len(piece)
        k += 1
        out = stream.feed(piece)
        got += out
        # Handed out no later than the piece that closed the object, and never before it.
        closed = raw[:at].count("}") - (1 if raw[:at].rstrip().endswith("}") and at == len(raw) else 0)
        assert len(got) <= closed
    assert [(s.text, list(s.sources)) for s in got] == [(s.strip(), ids) for s, ids in sentences]


@pytest.mark.unit
def test_sentence_stream_is_exact_about_when_a_sentence_is_complete():
    from wetqa.generation.structured import SentenceStream

    stream = SentenceStream()
    assert stream.feed('```json\n{"answer": [{"sentence": "Het gezag {eindigt} als \\"x\\"') == []
    assert stream.feed(' zegt.", "sources": ["DOC0226"]') == []
    [first] = stream.feed("}, ")
    assert first.text == 'Het gezag {eindigt} als "x" zegt.' and first.sources == ("DOC0226",)
    assert stream.feed('{"sentence": "Nog een.", "sources": []') == []
    assert [s.text for s in stream.feed("}]}\n```")] == ["Nog een."]
    # A broken sentence object is passed over, the next one still counts.
    broken = SentenceStream()
    assert [s.text for s in broken.feed('{"answer": [{"sentence": 3}, {"sentence": "Wel."}]}')] == ["Wel."]


@pytest.mark.unit
def test_parse_structured_checks_ids_and_keeps_the_complete_sentences_of_broken_json():
    from wetqa.generation.structured import parse_structured

    raw = _json_answer(("Eén.", ["DOC226", "DOC0226", "DOC0999"]), ("Twee.", ["DOC12988"]))
    p = parse_structured(raw, IDS)
    assert p.format_ok and p.problem is None
    assert [(s.text, s.sources) for s in p.sentences] == [("Eén.", ("DOC0226",)), ("Twee.", ("DOC12988",))]
    assert p.cited == ["DOC0226", "DOC12988"] and p.dropped == ["DOC0999"]
    cut = raw[: raw.index("Twee") + 2]  # max_tokens cut the second sentence
    p = parse_structured(cut, IDS)
    assert not p.format_ok and "not valid JSON" in p.problem
    assert [s.text for s in p.sentences] == ["Eén."] and p.cited == ["DOC0226"]
    for text in ("", "ANSWER: ja", "[1, 2]", '{"answer": "ja"}'):
        p = parse_structured(text, IDS)
        assert p.sentences == [] and not p.format_ok and p.problem


@pytest.mark.unit
def test_structured_request_prompt_and_schema():
    from wetqa.generation.prompt import as_text, build_request
    from wetqa.generation.structured import schema_ids

    r = build_request(QUESTION, HITS, structured=True)
    assert schema_ids(r.schema) == ["DOC0226", "DOC0099", "DOC0227"]
    user = r.messages[1]["content"]
    assert '{"answer": [{"sentence":' in user and "DOC IDS:" not in user and "[DOC0226] Wet X, Artikel 266" in user
    text = as_text(r)
    assert text.schema is None and text.messages == build_messages(QUESTION, HITS)
    # The structured and text prompts share nothing they should not: the example's law text only.
    assert "Minderjarigen zijn zij" in user and "Minderjarigen zijn zij" in text.messages[1]["content"]
    empty = build_request(QUESTION, [], language="en", structured=True)
    assert schema_ids(empty.schema) == [] and 'leave "sources" empty' in empty.messages[1]["content"]


@pytest.mark.unit
def test_structured_answer_markers_are_alce_passages_and_the_citations_their_union():
    """Each sentence carries [n] markers, n the rank of its source among the retrieved hits, so ALCE's
    per-sentence rule (evaluation.nli) resolves every marker to exactly the chunk the model cited."""
    from wetqa.evaluation.nli import cited_sentences, resolve_markers
    from wetqa.generation import Generation
    from wetqa.generation.pipeline import to_answer
    from wetqa.generation.prompt import build_request

    raw = _json_answer(
        ("De rechtbank kan het gezag beëindigen. Dat geldt ook bij schorsing.", ["DOC0227", "DOC0226"]),
        ("Fietsen mag op het fietspad", ["DOC0099"]),
    )
    a = to_answer(build_request(QUESTION, HITS, structured=True), Generation(text=raw))
    assert a.structured and a.format_ok and a.note is None and a.dropped_ids == []
    assert a.answer == (
        "De rechtbank kan het gezag beëindigen [3][1]. Dat geldt ook bij schorsing [3][1]. "
        "Fietsen mag op het fietspad [2]"
    )
    assert [c.doc_id for c in a.citations] == ["DOC0227", "DOC0226", "DOC0099"]
    assert [(s.text, s.sources) for s in a.sentences][1] == ("Fietsen mag op het fietspad", ("DOC0099",))
    retrieved = [{"id": h.chunk.id, "doc_id": h.chunk.doc_id} for h in HITS]
    judged = [(text, resolve_markers(m, retrieved)) for text, m in cited_sentences(a.answer)]
    assert judged == [
        ("De rechtbank kan het gezag beëindigen.", [HITS[2].chunk.id, HITS[0].chunk.id]),
        ("Dat geldt ook bij schorsing.", [HITS[2].chunk.id, HITS[0].chunk.id]),
        ("Fietsen mag op het fietspad", [HITS[1].chunk.id]),
    ]
    j = a.to_json()
    assert j["structured"] and j["sentences"][1] == {"sentence": "Fietsen mag op het fietspad", "sources": ["DOC0099"]}


@pytest.mark.unit
def test_bad_structured_output_is_one_clear_record_never_a_crash(bm25s_index, tmp_path):
    from wetqa.corpus.dataset import QAItem
    from wetqa.generation import Generation
    from wetqa.generation.pipeline import NO_SOURCES, to_answer
    from wetqa.generation.prompt import build_request

    truncated = _json_answer(("Het gezag eindigt.", ["DOC0001"]), ("Tweede zin", ["DOC0099"]))[:-30]
    outputs = [truncated, "ANSWER: Het gezag eindigt.\nDOC IDS: DOC0001", "{{{{ niets"]
    p = Pipeline(open_index(bm25s_index), Scripted(outputs), k=2, min_confidence=0)
    questions = ["Wanneer eindigt het gezag?", "Wat is rechtmatig verblijf?", "Welke tarieven griffierecht gelden?"]
    items = [QAItem(str(i), q) for i, q in enumerate(questions)]
    summary = generate_runs(p, items, tmp_path / "run", progress=False)
    assert summary["runs"][0]["failed"] == 0 and summary["runs"][0]["parse_failures"] == 3
    recs = {r["id"]: r for r in read_done(tmp_path / "run" / "run-1.jsonl").values()}
    cut, text, junk = recs["0"], recs["1"], recs["2"]
    assert cut["structured"] and cut["answer"] == "Het gezag eindigt [1]." and len(cut["sentences"]) == 1
    assert "JSON is broken" in cut["note"] and "kept its 1 complete sentences" in cut["note"]
    # Text where JSON was asked for (a server that ignored the schema): read as text, and said so.
    assert not text["structured"] and text["answer"] == "Het gezag eindigt." and "read as text" in text["note"]
    assert junk["error"] is None and "did not answer in the JSON format" in junk["note"]
    # Nothing retrieved: the answer has no sources and says so.
    empty = to_answer(build_request("Vraag?", [], structured=True), Generation(text=_json_answer(("Nee.", []))))
    assert empty.format_ok and empty.citations == [] and empty.note == NO_SOURCES and empty.answer == "Nee."


@pytest.mark.unit
def test_a_refused_schema_falls_back_to_the_text_format_once_with_one_warning(bm25s_index, caplog):
    text_answer = "ANSWER: De rechtbank kan het gezag beëindigen.\nDOC IDS: {doc}"
    backend = Scripted([text_answer.format(doc="DOC0001")] * 4, refuse_schema=True)
    p = Pipeline(open_index(bm25s_index), backend, k=2)
    assert p.structured
    with caplog.at_level("WARNING", logger="wetqa.generation"):
        answers = p.ask_many(["Wanneer eindigt het gezag?", "Wanneer kan de rechtbank het gezag beëindigen?"])
        later = p.ask("Wat is rechtmatig verblijf?")
    warnings = [r for r in caplog.records if r.name == "wetqa.generation"]
    assert len(warnings) == 1 and "refused the answer schema" in warnings[0].getMessage()
    assert "text format" in warnings[0].getMessage() and "\n" not in warnings[0].getMessage()
    assert all(not a.structured and a.error is None and a.answer.startswith("De rechtbank") for a in answers)
    assert not p.structured and not later.structured
    # Two refused, two asked again in text, then the third question straight in text.
    assert [r.schema is not None for r in backend.seen] == [True, True, False, False, False]


@pytest.mark.unit
def test_a_structured_stream_yields_sentences_with_their_sources(bm25s_index):
    from wetqa.generation import Answer, StreamedSentence

    index = open_index(bm25s_index)
    question = "Wanneer kan de rechtbank het gezag van een ouder beëindigen of een vreemdeling verblijf weigeren?"
    hits = index.search(question, 2)
    raw = _json_answer(
        ('Het gezag wordt "beëindigd" door de rechtbank.', [hits[0].chunk.doc_id]),
        ("Dat staat in de wet.", [hits[1].chunk.doc_id, hits[0].chunk.doc_id]),
    )
    backend = Scripted([raw])
    items = list(Pipeline(index, backend, k=2, min_confidence=0).stream(question))
    *sentences, answer = items
    assert isinstance(answer, Answer) and all(isinstance(s, StreamedSentence) for s in sentences)
    assert [s.text for s in sentences] == ['Het gezag wordt "beëindigd" door de rechtbank.', "Dat staat in de wet."]
    assert [[c.doc_id for c in s.citations] for s in sentences] == [
        [hits[0].chunk.doc_id],
        [hits[1].chunk.doc_id, hits[0].chunk.doc_id],
    ]
    assert [s.markers for s in sentences] == [[1], [2, 1]]
    assert " ".join(s.render() for s in sentences) == answer.answer
    # Refused before anything was written: the stream starts again in the text format.
    refusing = Scripted(["ANSWER: Het gezag eindigt, zoals de wet het zegt in dit artikel.\nDOC IDS: DOC0001"], True)
    pieces = list(Pipeline(index, refusing, k=2, min_confidence=0).stream(QUESTION))
    assert "".join(x for x in pieces if isinstance(x, str)) == pieces[-1].answer
    assert pieces[-1].answer.startswith("Het gezag eindigt") and not pieces[-1].structured


@pytest.mark.unit
def test_structured_is_a_setting_a_flag_a_toml_key_and_a_recorded_input(bm25s_index, tmp_path):
    import argparse

    from wetqa.generation import PipelineSpec

    assert resolve_generator("vllm", model="m").settings.structured is True  # on by default
    assert resolve_generator("gpt-4o", structured=False).settings.structured is False
    parser = argparse.ArgumentParser()
    PipelineSpec.add_cli_args(parser)
    args = parser.parse_args(["--index", str(bm25s_index), "--generator", "openai", "--model", "m", "--no-structured"])
    spec = PipelineSpec.from_cli_args(args)
    assert spec.generator.settings.structured is False and spec.inputs()["generator"]["structured"] is False
    toml = tmp_path / "p.toml"
    toml.write_text(f'index = "{bm25s_index}"\ngenerator = "openai"\nmodel = "m"\nstructured = true\n')
    on = PipelineSpec.from_toml(toml)
    assert on.inputs()["generator"]["structured"] is True
    assert on.inputs()["prompt"] != spec.inputs()["prompt"]  # the structured prompt is another prompt
    toml.write_text('generator = "openai"\nmodel = "m"\nstructured = "yes"\n')
    with pytest.raises(GenerationError, match="structured"):
        PipelineSpec.from_toml(toml)
    with pytest.raises(GenerationError, match="--structured does not apply to the extractive"):
        resolve_generator("extractive", structured=True)


@pytest.mark.unit
def test_the_openai_backend_falls_back_when_a_server_refuses_response_format(bm25s_index, caplog):
    """A server that refuses json_schema answers 400 as the OpenAI API does for models without it; the
    backend reports it, the pipeline asks again in text (once, with one warning), streams too. A 400
    about something else (a prompt too long) is an error, not a fallback."""
    from fastapi import FastAPI
    from fastapi.responses import JSONResponse, StreamingResponse

    from .serving import LiveServer

    bodies: list[dict] = []
    app = FastAPI()

    @app.post("/v1/chat/completions")
    async def chat(body: dict):
        bodies.append(body)
        if "too long" in body["messages"][-1]["content"]:
            return JSONResponse({"error": {"message": "This model's maximum context length is 2048 tokens"}}, 400)
        if "response_format" in body:
            message = "Invalid parameter: 'response_format' of type 'json_schema' is not supported with this model."
            error = {"message": message, "type": "invalid_request_error", "param": "response_format", "code": None}
            return JSONResponse({"error": error}, 400)
        text = "ANSWER: De rechtbank beëindigt het gezag.\nDOC IDS: DOC0001"
        if body.get("stream"):
            chunk = {"id": "c", "object": "chat.completion.chunk", "created": 0, "model": "m"}
            events = [
                {**chunk, "choices": [{"index": 0, "delta": {"content": w}, "finish_reason": None}]}
                for w in re.findall(r"\S+\s*", text)
            ]
            events.append({**chunk, "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]})
            lines = "".join(f"data: {json.dumps(e)}\n\n" for e in events) + "data: [DONE]\n\n"
            return StreamingResponse(iter([lines]), media_type="text/event-stream")
        usage = {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}
        message = {"role": "assistant", "content": text}
        choice = {"index": 0, "message": message, "finish_reason": "stop"}
        return {"id": "c", "object": "chat.completion", "created": 0, "model": "m", "choices": [choice], "usage": usage}

    with LiveServer(app) as server:
        cfg = resolve_generator("openai", model="m", base_url=server.url + "/v1", max_retries=0)
        backend = make_backend(cfg)
        index = open_index(bm25s_index)
        p = Pipeline(index, backend, k=2)
        with caplog.at_level("WARNING", logger="wetqa.generation"):
            a = p.ask(QUESTION)
        assert a.answer == "De rechtbank beëindigt het gezag." and [c.doc_id for c in a.citations] == ["DOC0001"]
        assert not a.structured and a.format_ok and not p.structured
        sent = bodies[0]["response_format"]
        assert sent["type"] == "json_schema" and sent["json_schema"]["strict"] is True
        assert "maxLength" in json.dumps(sent)  # a server at a base URL gets the bounds too
        assert sent["json_schema"]["schema"]["properties"]["answer"]["items"]["properties"]["sources"]["items"][
            "enum"
        ] == ["DOC0001"]
        assert "response_format" not in bodies[1]
        [warning] = [r.getMessage() for r in caplog.records if r.name == "wetqa.generation"]
        assert "refused the answer schema" in warning and "'response_format' of type 'json_schema'" in warning
        # A stream that is refused starts again in text, on a fresh pipeline.
        streaming = Pipeline(index, backend, k=2)
        *pieces, answer = list(streaming.stream(QUESTION))
        assert "".join(pieces) == answer.answer == "De rechtbank beëindigt het gezag." and not answer.structured
        assert "response_format" in bodies[2] and "response_format" not in bodies[3] and bodies[3]["stream"]
        # Not every 400 is about the schema.
        from wetqa.generation.prompt import build_request

        gen = backend.generate([build_request("too long", index.search(QUESTION, 1), structured=True)])[0]
        assert gen.error and "context overflow" in gen.error and not gen.rejected_schema


@pytest.mark.unit
def test_presets_name_their_window_availability_and_doctor_says_which_are_cached(monkeypatch, tmp_path):
    from wetqa.doctor import report
    from wetqa.generation.presets import PRESETS

    hub = tmp_path / "hub"
    (hub / "models--Qwen--Qwen3-8B").mkdir(parents=True)
    monkeypatch.setenv("HF_HUB_CACHE", str(hub))
    presets = {p["name"]: p for p in report()["presets"]}
    assert set(presets) == set(PRESETS)
    assert presets["qwen3-8b"]["in_hf_cache"] is True and presets["qwen3-14b"]["in_hf_cache"] is False
    assert presets["gpt-4o"]["in_hf_cache"] is None  # nothing to download
    for name in ("geitje-7b-ultra",):
        assert presets[name]["note"].startswith("may be unavailable: taken offline in 2025")
    # Every open-model preset resolves, with the published sampling, its window and (Qwen3) no thinking.
    for name, preset in PRESETS.items():
        if preset.kind == "vllm":
            s = resolve_generator(name).settings
            assert (s.temperature, s.top_k, s.max_tokens) == (0.2, 50, 5000) and s.structured
    assert resolve_generator("eurollm-9b-instruct").settings.max_model_len == 4096
    assert resolve_generator("gemma-3-27b-it").settings.max_model_len == 32768
    assert resolve_generator("qwen3-8b").settings.thinking is False
    assert resolve_generator("fietje-2").settings.max_model_len is None  # as the published runs used it
    # Moved to transformers, the window is the model's own (max_model_len is vLLM's) and thinking stays.
    moved = resolve_generator("qwen3-8b", backend="transformers").settings
    assert moved.thinking is False and not hasattr(moved, "max_model_len")


@pytest.mark.unit
def test_chat_templates_without_a_system_role_and_with_a_thinking_switch():
    from tokenizers import Tokenizer, models
    from transformers import PreTrainedTokenizerFast

    from wetqa.generation.backends.transformers_backend import chat_prompt

    tok = PreTrainedTokenizerFast(tokenizer_object=Tokenizer(models.WordLevel({"[UNK]": 0}, unk_token="[UNK]")))
    tok.chat_template = (
        "{% for m in messages %}{% if m['role'] == 'system' %}{{ raise_exception('System role not supported') }}"
        "{% endif %}<{{ m['role'] }}>{{ m['content'] }}{% endfor %}"
        "{% if enable_thinking is defined and not enable_thinking %}<no-think>{% endif %}<assistant>"
    )
    messages = build_messages("Vraag?", [])
    text = chat_prompt(tok, messages, tokenize=False, enable_thinking=False)
    assert text.startswith("<user>" + messages[0]["content"] + "\n\n" + messages[1]["content"][:20])
    assert text.endswith("<no-think><assistant>")
    assert "<no-think>" not in chat_prompt(tok, messages, tokenize=False)
    tok.chat_template = "{{ raise_exception('broken template') }}"
    with pytest.raises(Exception, match="broken template"):  # other template errors are not hidden
        chat_prompt(tok, messages, tokenize=False)


@pytest.mark.unit
def test_a_toml_date_is_a_date(bm25s_index, tmp_path):
    """Bug: TOML's own date (`date = 2012-10-04`, unquoted) was refused: "expected str, got datetime.date"."""
    from wetqa.generation import PipelineSpec

    toml = tmp_path / "p.toml"
    toml.write_text(f'index = "{bm25s_index}"\ndate = 2012-10-04\n')
    quoted = tmp_path / "q.toml"
    quoted.write_text(f'index = "{bm25s_index}"\ndate = "2012-10-04"\n')
    assert PipelineSpec.from_toml(toml).retrieval.date == PipelineSpec.from_toml(quoted).retrieval.date == "2012-10-04"


@pytest.mark.unit
@pytest.mark.parametrize("url", ["notaurl", "127.0.0.1:8000/v1", "ftp://host/v1"])
def test_a_base_url_that_is_not_a_url_is_bad_input(url):
    """Bug: `--base-url notaurl` went to the server as a relative address and failed as "unavailable" (exit 3)."""
    from wetqa.generation._base import GenerationError
    from wetqa.generation.backends.openai_backend import OpenAIBackend, OpenAISettings

    with pytest.raises(GenerationError, match=rf"the server URL {url} is not an http\(s\) URL"):
        OpenAIBackend(OpenAISettings(model="m", base_url=url))
    assert (
        OpenAIBackend(OpenAISettings(model="m", base_url="http://127.0.0.1:9/v1")).base_url == "http://127.0.0.1:9/v1"
    )
