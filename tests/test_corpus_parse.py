import pytest

from wetqa.corpus import ChunkingOptions, chunk_articles, parse_law
from wetqa.corpus.chunking import split_words

from .conftest import FIXTURES

pytestmark = pytest.mark.unit

TOESTAND = FIXTURES / "bwb" / "toestand_wet_fictief.xml"
WETGEVING = FIXTURES / "bwb" / "wetgeving_besluit_oud.xml"


def test_toestand_law_metadata():
    law = parse_law(TOESTAND).law
    assert law.law_id == "BWBR9990001"
    assert law.title == "Wet fictief gezag"  # citeertitel, without its meta-data
    assert law.long_title.startswith("Wet van 1 januari 2020, houdende regels")
    assert law.kind == "wet"
    assert law.version_date == "2024-01-01"
    assert law.source_format == "toestand"


def test_articles_labels_hierarchy_and_text():
    arts = {a.article: a for a in parse_law(TOESTAND).articles}
    assert list(arts) == ["Artikel 266", "Artikel 267", "Artikel 7.3.12", "Artikel 1:2"]
    a = arts["Artikel 266"]
    assert [(d.kind, d.number) for d in a.path] == [("boek", "1"), ("titeldeel", "14"), ("afdeling", "5")]
    assert a.path_label() == ("Boek 1. Personen > Titel 14. Gezag over kinderen > Afdeling 5. Einde van het gezag")
    assert a.paragraphs == [
        "1. De rechtbank kan een ouder zijn gezag geheel beëindigen wanneer:\n"
        "a. het kind bij die ouder ernstig wordt bedreigd in zijn groei, of\n"
        "b. de ouder zijn gezag verwaarloost, zie artikel 267.",
        "2. Het gezag kan de rechtbank eveneens beëindigen als het geschorst is.",
    ]
    assert "jci" not in a.text and "BWBR" not in a.text  # meta-data never leaks into text
    assert not a.expired
    assert arts["Artikel 267"].expired
    assert arts["Artikel 7.3.12"].title == "Tabel"
    assert arts["Artikel 7.3.12"].text == "De tarieven zijn:\nZaak | Bedrag\nVerzoek één | € 85"
    assert arts["Artikel 7.3.12"].path[-1].number == "2.1"


def test_older_wetgeving_format():
    parsed = parse_law(WETGEVING)
    assert parsed.law.law_id == "BWBR9990002"
    assert parsed.law.source_format == "wetgeving"
    assert parsed.law.kind == "AMvB"
    assert parsed.law.title == "Fictief Vreemdelingenbesluit"
    a, b = parsed.articles
    assert a.article == "Artikel 2b"
    assert a.paragraphs[1] == "2. Het eerste lid is niet van toepassing op:\n1°. diplomaten;\n2°. militairen."
    assert a.paragraphs[0].startswith("1. Een vreemdeling")  # "1." is not doubled to "1.."
    assert b.expired  # "[Vervallen]" without a status attribute


def test_words150_cuts_at_150_words_and_keeps_expired():
    arts = parse_law(TOESTAND).articles
    chunks = list(chunk_articles(arts, ChunkingOptions("words150")))
    long = [c for c in chunks if c.article == "Artikel 1:2"]
    assert [len(c.text.split()) for c in long] == [150, 150, 20]
    assert [c.part for c in long] == [1, 2, 3]
    assert [c.doc_id for c in chunks] == [f"DOC{i:04d}" for i in range(1, len(chunks) + 1)]
    expired = [c for c in chunks if c.article == "Artikel 267"]
    assert len(expired) == 1 and expired[0].text == "Vervallen" and expired[0].expired
    assert long[0].id == "BWBR9990001_2024-01-01_art1-2_1"
    assert len({c.id for c in chunks}) == len(chunks)


def test_structured_splits_at_lid_and_prefixes_search_text():
    arts = parse_law(TOESTAND).articles
    chunks = list(chunk_articles(arts, ChunkingOptions("structured", max_words=40)))
    assert all(c.article != "Artikel 267" for c in chunks)  # expired left out by default
    art266 = [c for c in chunks if c.article == "Artikel 266"]
    assert len(art266) == 2  # lid 1 (33 words) and lid 2 (12 words) do not fit 40 words together
    assert art266[0].text.startswith("1. De rechtbank") and art266[1].text.startswith("2. Het gezag")
    assert art266[0].search_text.startswith("Wet fictief gezag, Artikel 266\n")
    small = [c for c in chunk_articles(arts, ChunkingOptions("structured", max_words=20)) if c.article == "Artikel 266"]
    assert [len(c.text.split()) for c in small] == [20, 13, 12]  # only the oversized lid is cut by words
    with_expired = list(chunk_articles(arts, ChunkingOptions("structured", include_expired=True)))
    assert any(c.article == "Artikel 267" for c in with_expired)


def test_stable_ids_do_not_depend_on_corpus_order():
    toestand = parse_law(TOESTAND).articles
    old = parse_law(WETGEVING).articles
    a = {c.id: c.doc_id for c in chunk_articles(toestand + old, ChunkingOptions())}
    b = {c.id: c.doc_id for c in chunk_articles(old + toestand, ChunkingOptions())}
    assert a.keys() == b.keys()
    assert a != b  # the positional DOC ids do move


def test_split_words_keeps_line_breaks():
    assert split_words("a b\nc d e", 2) == ["a b", "c d", "e"]
    assert split_words("", 5) == []


def test_bad_chunking_options():
    with pytest.raises(ValueError, match="unknown chunking strategy 'sentences'"):
        ChunkingOptions("sentences")
    with pytest.raises(ValueError, match="max_words must be >= 1"):
        ChunkingOptions(max_words=0)
