"""Corpus sources are parts: a toy collection (a folder of plain-text documents) goes through the same
path as the BWB (build, index, ask, serve) without any stage outside ``corpus/`` knowing the BWB."""

from __future__ import annotations

import json
import re
from urllib.parse import quote

import httpx
import pytest

from wetqa.corpus import Article, DocumentError, FileVersion, Law, ParsedLaw, load_chunks
from wetqa.corpus.sources import get_source, register, unregister

TOY_ID = re.compile(r"TOY-[0-9]+")


class PlainTextSource:
    """``TOY-N.txt``: the first line is the document's title, each following block of lines an article."""

    name, description = "toy", "plain-text documents of a test collection"
    id_field, id_example = "toy_id", "TOY-1"
    suffixes: tuple[str, ...] = (".txt",)

    def file_version(self, file_name: str) -> FileVersion | None:
        m = re.fullmatch(r"(TOY-[0-9]+)\.txt", file_name)
        return FileVersion(m.group(1)) if m else None

    def parse(self, data: bytes, name: str) -> ParsedLaw:
        named = self.file_version(name.rsplit("/", 1)[-1])
        if named is None:
            raise DocumentError(name, "not named TOY-N.txt")
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            raise DocumentError(name, "not UTF-8 text") from None
        title, _, body = text.strip().partition("\n")
        law = Law(named.law_id, title.strip(), title.strip(), "reglement", "", "text", source_file=name)
        blocks = [b.strip() for b in re.split(r"\n\s*\n", body) if b.strip()]
        articles = [
            Article(law.law_id, "", law.title, f"Artikel {n}", str(n), "", [], [block], False, ordinal=n - 1)
            for n, block in enumerate(blocks, 1)
        ]
        return ParsedLaw(law, articles)

    def is_id(self, text: str) -> bool:
        return bool(TOY_ID.fullmatch(text))

    def url(self, law_id: str, article: str, unit: str, version_date: str) -> str:
        return f"https://toy.example/{law_id}#{quote(article)}"

    def metadata(self, law_id: str) -> dict[str, str]:
        return {"toy_id": law_id}


DOCUMENTS = {
    "TOY-1.txt": "Reglement van de volkstuinvereniging\n\n"
    "Een lid mag op zijn volkstuin geen bomen planten die hoger worden dan drie meter.\n\n"
    "Het bestuur int de contributie voor de volkstuin jaarlijks in maart.",
    "TOY-2.txt": "Reglement van de schaakclub\n\n"
    "Een partij in de clubcompetitie duurt ten hoogste vier uur.\n\n"
    "Wie zonder bericht wegblijft, verliest de partij en betaalt een boete van vijf euro aan de schaakclub.",
}
QUESTION = "Welke boete betaalt wie zonder bericht wegblijft van de schaakclub?"


@pytest.fixture(scope="module")
def toy_source():
    """The toy collection, registered for this module's tests only."""
    source = register(PlainTextSource())
    yield source
    unregister(source.name)


@pytest.fixture(scope="module")
def toy_index(toy_source, tmp_path_factory):
    from wetqa.corpus import BuildOptions, build_corpus
    from wetqa.retrieval import build_index

    root = tmp_path_factory.mktemp("toy")
    (root / "docs").mkdir()
    for name, text in DOCUMENTS.items():
        (root / "docs" / name).write_text(text, encoding="utf-8")
    (root / "docs" / "leesmij.md").write_text("not a document of the collection", encoding="utf-8")
    report = build_corpus([root / "docs"], root / "corpus", BuildOptions(collection="toy", workers=1), progress=False)
    assert (report.laws, report.chunks, report.failures) == (2, 4, [])
    build_index(root / "corpus", "articles", root / "index", progress=False)  # the default kind
    return root


@pytest.mark.unit
def test_a_toy_source_builds_records_of_its_own_collection(toy_index):
    manifest = json.loads((toy_index / "corpus" / "manifest.json").read_text(encoding="utf-8"))
    assert manifest["options"]["collection"] == "toy"
    assert [(r["collection"], r["law_id"], r["title"]) for r in manifest["sources"]] == [
        ("toy", "TOY-1", "Reglement van de volkstuinvereniging"),
        ("toy", "TOY-2", "Reglement van de schaakclub"),
    ]
    articles = [json.loads(x) for x in (toy_index / "corpus" / "articles.jsonl").read_text().splitlines()]
    assert {a["collection"] for a in articles} == {"toy"} and len(articles) == 4
    # Beside law_id, the collection's own name for it (a BWB record's bwb_id), and no other collection's.
    assert all(a["toy_id"] == a["law_id"] and "bwb_id" not in a for a in articles)
    # Read alone (no index joins the law in), a chunk still names its collection.
    assert {c.collection for c in load_chunks(toy_index / "corpus")} == {"toy"}


@pytest.mark.unit
def test_parser_processes_are_handed_the_source_itself(toy_source, tmp_path):
    from wetqa.corpus import BuildOptions, build_corpus

    for n in range(1, 10):  # 8 files or more go to worker processes
        (tmp_path / f"TOY-{n}.txt").write_text(f"Reglement {n}\n\nArtikeltekst nummer {n}.", encoding="utf-8")
    report = build_corpus([tmp_path], tmp_path / "c", BuildOptions(collection="toy", workers=2), progress=False)
    assert (report.laws, report.failures) == (9, [])
    assert get_source("toy") is toy_source


@pytest.mark.unit
def test_ask_cites_the_toy_document_with_its_own_link(toy_index, capsys):
    from wetqa.cli import main

    index = str(toy_index / "index")
    assert main(["ask", QUESTION, "--index", index, "--generator", "extractive", "--output", "json"]) == 0
    out = json.loads(capsys.readouterr().out)
    first = out["citations"][0]
    assert (first["collection"], first["law_id"], first["toy_id"], first["article"]) == (
        "toy",
        "TOY-2",
        "TOY-2",
        "Artikel 2",
    )
    assert first["url"] == "https://toy.example/TOY-2#Artikel%202" and "bwb_id" not in first
    # The scope filter takes the collection's ids; an id of no registered collection is one line, exit 2.
    query = ["search", "reglement van de schaakclub en de volkstuin", "--index", index, "--output", "json"]
    assert main(query) == 0
    assert {h["law_id"] for h in json.loads(capsys.readouterr().out)["hits"]} == {"TOY-1", "TOY-2"}
    assert main([*query, "--laws", "TOY-1"]) == 0
    assert {h["law_id"] for h in json.loads(capsys.readouterr().out)["hits"]} == {"TOY-1"}
    assert main(["search", "partij", "--index", index, "--laws", "geen-id"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "'geen-id' is not a document id" in err and "TOY-1" in err


@pytest.mark.unit
def test_an_unknown_collection_is_a_one_line_error(toy_source, tmp_path, capsys):
    from wetqa.cli import main

    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "TOY-1.txt").write_text(DOCUMENTS["TOY-1.txt"], encoding="utf-8")
    code = main(
        ["corpus", "build", "--source", str(tmp_path / "docs"), "--collection", "nergens", "--out", str(tmp_path / "c")]
    )
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1 and "no corpus source 'nergens'" in err and "bwb" in err
    assert not (tmp_path / "c").exists()


@pytest.mark.integration
def test_the_server_serves_the_toy_collection(toy_index):
    import openai

    from .serving import LiveServer, make_app, served_pipeline

    app = make_app([served_pipeline("wetqa-toy", toy_index / "index")])
    with LiveServer(app) as server:
        client = openai.OpenAI(base_url=server.url + "/v1", api_key="x")
        answer = client.chat.completions.create(model="wetqa-toy", messages=[{"role": "user", "content": QUESTION}])
        cited = answer.model_extra["citations"][0]
        assert (cited["collection"], cited["law_id"], cited["toy_id"]) == ("toy", "TOY-2", "TOY-2")
        assert cited["url"].startswith("https://toy.example/TOY-2")
        chunk = httpx.get(f"{server.url}/v1/chunks/{cited['id']}").json()
        assert chunk["collection"] == "toy" and "boete van vijf euro" in chunk["article_text"]
        versions = httpx.get(f"{server.url}/v1/articles/TOY-2/Artikel 2/versions").json()
        assert versions["toy_id"] == "TOY-2" and versions["data"][0]["url"] == "https://toy.example/TOY-2#Artikel%202"
        page = httpx.get(server.url + "/").text
        assert "<html" in page.lower()


# ------------------------------------------------------------------ data written before records said law_id
@pytest.mark.unit
def test_gold_articles_may_name_the_law_as_their_collection_does(tmp_path):
    from wetqa.corpus.dataset import load_dataset

    data = tmp_path / "dev.jsonl"
    rows = [
        {"id": "a", "question": "q?", "articles": [{"bwb_id": "BWBR9990001", "article": "Artikel 266"}]},
        {"id": "b", "question": "q?", "articles": [{"law_id": "BWBR9990002", "article": "Artikel 2"}]},
    ]
    data.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    assert [a.key for item in load_dataset(data) for a in item.articles] == [
        "BWBR9990001|Artikel 266",
        "BWBR9990002|Artikel 2",
    ]


@pytest.mark.unit
def test_a_corpus_of_before_law_id_is_indexed_and_cited_the_same(fixture_corpus, tmp_path):
    import shutil

    from wetqa.retrieval import build_index, open_index

    old = tmp_path / "corpus"
    shutil.copytree(fixture_corpus, old)
    for name in ("articles.jsonl", "chunks.jsonl", "manifest.json"):  # as a corpus of format 3 named them
        path = old / name
        path.write_text(path.read_text(encoding="utf-8").replace('"law_id"', '"bwb_id"'), encoding="utf-8")
    assert '"law_id"' not in (old / "chunks.jsonl").read_text(encoding="utf-8")
    build_index(old, "articles", tmp_path / "index", progress=False)
    hit = open_index(tmp_path / "index").search("gezag van een ouder beëindigen", k=1)[0].to_json()
    assert (hit["collection"], hit["law_id"], hit["bwb_id"], hit["article"]) == (
        "bwb",
        "BWBR9990001",
        "BWBR9990001",
        "Artikel 266",
    )


@pytest.mark.unit
def test_an_index_store_of_an_older_format_is_refused_with_the_rebuild_command(fixture_corpus, tmp_path):
    import sqlite3

    from wetqa.retrieval import RetrievalError, build_index
    from wetqa.retrieval.engines.store import STORE, ChunkStore

    build_index(fixture_corpus, "articles", tmp_path / "index", progress=False)
    db = sqlite3.connect(tmp_path / "index" / STORE)
    db.execute("UPDATE meta SET value = '2' WHERE key = 'format'")  # a store of before `collection`
    db.commit()
    db.close()
    with pytest.raises(RetrievalError, match=r"format 2, this wetqa reads 3; rebuild the index with `wetqa index"):
        ChunkStore(tmp_path / "index" / STORE)
