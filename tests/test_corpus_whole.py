"""Every regulation of the whole BWB parses, and all of its text reaches a chunk (issue 27): treaties
(BWBV) and BWBW ids, regulations without articles (circulaires: their paragraphs), bijlagen, tables with
their headers, preambles; short titles from "aangehaald als" clauses and from how other regulations
refer to one; BES regulations marked; undated files dated by --valid-on; a law without a chunk listed."""

from __future__ import annotations

import json
import shutil

import pytest

from wetqa.cli import main
from wetqa.corpus import parse_law
from wetqa.corpus.build import BuildOptions, build_corpus
from wetqa.corpus.bwb import reference_name, short_title_of
from wetqa.corpus.chunking import ChunkingOptions

from .conftest import FIXTURES

pytestmark = pytest.mark.unit
OLD = FIXTURES / "bwb2012"


def _units(name: str):
    return {a.article: a for a in parse_law(OLD / name).articles}


def test_a_treaty_parses_with_its_texts_in_every_language():
    parsed = parse_law(OLD / "BWBV9990001.xml")
    assert parsed.law.law_id == "BWBV9990001" and parsed.law.kind == "verdrag"
    units = {a.article: a for a in parsed.articles}
    assert list(units) == ["Aanhef", "Artikel 1", "Artikel 2", "Tekst en"]
    assert units["Artikel 1"].path[-1].kind == "verdragtekst"
    assert "trawl nets" in units["Tekst en"].text and units["Tekst en"].unit == "verdragtekst"
    assert "wateren" in units["Aanhef"].text


def test_a_circulaire_without_articles_becomes_its_paragraphs_and_bijlagen():
    units = _units("BWBR9990101.xml")
    assert list(units) == ["Paragraaf 1.1", "Bijlage 2"]
    par = units["Paragraaf 1.1"]
    assert par.title == "Aanvraag verblijfsvergunning asiel" and par.unit == "circulaire.divisie"
    assert par.path_label() == "Paragraaf 1. Verblijf > Paragraaf 1.1. Aanvraag verblijfsvergunning asiel"
    # Tables row by row, each value after its column's header.
    assert par.paragraphs[1:] == ["Leeftijd: tot 18 jaar; Leges: EUR 50\nLeeftijd: vanaf 18 jaar; Leges: EUR 300"]
    assert units["Bijlage 2"].unit == "bijlage" and units["Bijlage 2"].title == "Modelbrief"
    assert all("Minister voor Immigratie" not in u.text for u in units.values())  # the signature is no text


def test_short_titles_from_clauses_and_one_word_article_regulations():
    assert parse_law(OLD / "BWBR9990103.xml").law.title == "Fictieve Politiewet 1994"
    bes = parse_law(OLD / "BWBR9990104.xml").law
    assert bes.title == "Fictieve Wet minimumlonen BES" and bes.jurisdiction == "bes"  # the first citeertitel
    assert parse_law(OLD / "BWBR9990102.xml").law.title == "Wet van 12 mei 1877"  # none stated
    enig = parse_law(OLD / "BWBW99901.xml")
    assert enig.law.law_id == "BWBW99901" and [a.article for a in enig.articles] == ["Enig artikel"]
    assert [a.article for a in parse_law(OLD / "BWBV9990002.xml").articles] == ["Titel"]  # titles only


@pytest.mark.parametrize(
    ("clause", "title"),
    [
        ("Deze wet kan worden aangehaald als: Wet X.", "Wet X"),
        ("Dit besluit wordt aangehaald als 'Besluit Y 2005'.", "Besluit Y 2005"),
        ("Deze wet kan worden aangehaald als: Wet Z, met vermelding van het jaartal van het Staatsblad.", "Wet Z 1993"),
        ("Deze wet wordt aangehaald als: gewoon geen titel", ""),  # malformed: no title
        ("Deze wet wordt aangehaald als:", ""),
        ("Deze wet kan worden aangehaald als " + "Wet " * 80, ""),  # too long to be a title
        ("Geen clausule", ""),
    ],
)
def test_short_title_clauses(clause, title):
    assert short_title_of(clause, "Wet van 7 juli 1993") == title


def test_reference_names():
    assert reference_name("artikel 184, eerste lid, van het Wetboek van Strafrecht") == "Wetboek van Strafrecht"
    assert reference_name("Titel 7B van Boek 7 van het Burgerlijk Wetboek") == "Burgerlijk Wetboek"
    assert reference_name("artikel 3") == "" and reference_name("Onze Minister") == ""


def _build(tmp_path, sources, **options):
    opts = BuildOptions(workers=1, **options)
    return build_corpus(sources, tmp_path / "corpus", opts, progress=False)


def _articles(tmp_path):
    return [json.loads(x) for x in (tmp_path / "corpus" / "articles.jsonl").read_text().splitlines()]


def test_the_whole_fixture_set_builds_without_a_failure_and_a_nameless_law_takes_its_cited_name(tmp_path):
    report = _build(tmp_path, [OLD], valid_on="2012-10-04")
    assert report.failures == [] and report.laws == 7
    manifest = json.loads((tmp_path / "corpus" / "manifest.json").read_text())
    rows = {r["law_id"]: r for r in manifest["sources"]}
    # "Wet van 12 mei 1877" is referred to as the Fictief Strafwetboek by two other regulations.
    assert rows["BWBR9990102"]["title"] == "Fictief Strafwetboek"
    assert rows["BWBR9990102"]["long_title"] == "Wet van 12 mei 1877"
    renamed = [a for a in _articles(tmp_path) if a["law_id"] == "BWBR9990102"]
    assert renamed and {a["law"] for a in renamed} == {"Fictief Strafwetboek"}
    chunks = (tmp_path / "corpus" / "chunks.jsonl").read_text().splitlines()
    assert {json.loads(c)["law"] for c in chunks if "BWBR9990102" in c} == {"Fictief Strafwetboek"}
    assert rows["BWBR9990104"]["jurisdiction"] == "bes" and rows["BWBV9990001"]["kind"] == "verdrag"
    assert manifest["holds"]["jurisdictions"] == {"nl": 6, "bes": 1}
    assert all(a["version_date"] == "2012-10-04" for a in _articles(tmp_path))
    assert len(manifest["undated"]) == 7


def test_without_valid_on_undated_files_are_listed_with_an_empty_date(tmp_path):
    report = _build(tmp_path, [OLD / "BWBR9990103.xml"])
    assert report.undated == [{"file": "BWBR9990103.xml", "law_id": "BWBR9990103"}]
    assert _articles(tmp_path)[0]["version_date"] == ""


def test_an_undated_file_is_the_same_version_as_a_dated_one_that_starts_before_it(tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    shutil.copy(OLD / "BWBR9990103.xml", src / "BWBR9990103.xml")
    shutil.copy(OLD / "BWBR9990103.xml", src / "BWBR9990103_2010-01-01_0.xml")
    report = _build(tmp_path, [src], valid_on="2012-10-04")
    assert report.laws == 1 and report.duplicates[0]["file"] == "BWBR9990103.xml"
    assert report.duplicates[0]["kept"] == "BWBR9990103_2010-01-01_0.xml"


def test_an_undated_file_older_than_a_dated_version_is_kept_and_ends_when_that_one_starts(tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    shutil.copy(OLD / "BWBR9990103.xml", src / "BWBR9990103.xml")
    shutil.copy(OLD / "BWBR9990103.xml", src / "BWBR9990103_2024-01-01_0.xml")
    report = _build(tmp_path, [src], valid_on="2012-10-04")
    assert report.laws == 2 and not report.duplicates
    by_version = {a["version_date"]: a["valid_until"] for a in _articles(tmp_path)}
    assert by_version == {"2012-10-04": "2024-01-01", "2024-01-01": ""}


def test_a_law_without_a_chunk_is_a_listed_failure(tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    (src / "BWBR9990199.xml").write_text(
        '<wetgeving bwb-id="BWBR9990199" soort="wet"><intitule>Wet leeg</intitule><wet-besluit><wettekst>'
        "<artikel><kop><label>Artikel</label><nr>1</nr></kop><al>[Vervallen]</al></artikel>"
        "</wettekst></wet-besluit></wetgeving>",
        encoding="utf-8",
    )
    shutil.copy(OLD / "BWBR9990103.xml", src)
    report = _build(tmp_path, [src], chunking=ChunkingOptions("structured", 200))
    assert report.laws == 1
    assert [(f.file, f.problem) for f in report.failures] == [
        ("BWBR9990199.xml", "no chunk: every article has expired")
    ]


def test_valid_on_must_be_a_date(tmp_path, capsys):
    for bad in ("2012-13-01", "04-10-2012", "２０１２-10-04"):
        with pytest.raises(SystemExit) as exit_info:
            main(["corpus", "build", "--source", str(OLD), "--out", str(tmp_path / "c"), "--valid-on", bad])
        assert exit_info.value.code == 2
        assert len(capsys.readouterr().err.strip().splitlines()) == 1
    assert not (tmp_path / "c").exists()


def test_a_decree_rests_on_the_formal_law_it_refers_to_again_and_again(tmp_path):
    """``parent``: the formal law a regulation refers to most, at least twice (a single mention is any
    text's passing reference); a formal law itself rests on none."""
    src = tmp_path / "src"
    shutil.copytree(OLD, src)
    decree = (src / "BWBW99901.xml").read_text(encoding="utf-8")
    again = ' en <intref doc="1.0:v:BWBR9990102">artikel 2 van dat wetboek</intref></al>'
    (src / "BWBW99902.xml").write_text(
        decree.replace("BWBW99901", "BWBW99902").replace("zijn belast.</al>", "zijn belast" + again), encoding="utf-8"
    )
    _build(tmp_path, [src], valid_on="2012-10-04")
    rows = {r["law_id"]: r for r in json.loads((tmp_path / "corpus" / "manifest.json").read_text())["sources"]}
    assert rows["BWBW99902"]["parent"] == "BWBR9990102"  # twice
    assert rows["BWBW99901"]["parent"] == ""  # once
    assert rows["BWBR9990103"]["parent"] == ""  # a wet referring to another three times rests on none
