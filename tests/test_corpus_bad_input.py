"""Each kind of bad law file gives a clear, per-file error; the other laws are still built."""

import json
import shutil

import pytest

from wetqa.corpus import BuildOptions, BWBParseError, CorpusBuildError, build_corpus, parse_law

from .conftest import FIXTURES

pytestmark = pytest.mark.unit

XXE = b"""<?xml version="1.0" encoding="UTF-8"?>
<!DOCTYPE toestand [ <!ENTITY xxe SYSTEM "file:///etc/passwd"> ]>
<toestand bwb-id="BWBR9990003" inwerkingtreding="2024-01-01"><wetgeving soort="wet"><citeertitel>X</citeertitel>
<wet-besluit><wettekst><artikel><kop><label>Artikel</label><nr>1</nr></kop><al>&xxe;</al></artikel></wettekst></wet-besluit>
</wetgeving></toestand>"""

BOMB = b"""<?xml version="1.0"?>
<!DOCTYPE lolz [
 <!ENTITY lol "lol">
 <!ENTITY lol2 "&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;">
 <!ENTITY lol3 "&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;">
]>
<toestand bwb-id="BWBR9990004"><wetgeving><al>&lol3;</al></wetgeving></toestand>"""

# The text check stopped at the first "]>": one inside a comment hid the declaration after it, and
# the entity was expanded into the law's id (issue 21).
HIDDEN = b"""<?xml version="1.0" encoding="UTF-8"?>
<!DOCTYPE toestand [ <!-- ]> --> <!ENTITY id "BWBR9990666"> ]>
<toestand bwb-id="&id;" inwerkingtreding="2024-01-01"><wetgeving soort="wet"><citeertitel>X</citeertitel>
<wet-besluit><wettekst><artikel><kop><label>Artikel</label><nr>1</nr></kop><al>Tekst.</al></artikel></wettekst>
</wet-besluit></wetgeving></toestand>"""

CASES = {
    "xxe.xml": (XXE, "declares XML entities"),
    "hidden_entity.xml": (HIDDEN, "declares XML entities"),
    "bomb.xml": (BOMB, "declares XML entities"),
    "truncated.xml": (None, "truncated or unbalanced XML"),
    "wrong_root.xml": (b'<?xml version="1.0"?><html><body>niet een wet</body></html>', "root element <html>"),
    "empty.xml": (b"", "empty file"),
    "latin1.xml": (
        '<?xml version="1.0" encoding="UTF-8"?><toestand>caf\xe9</toestand>'.encode("latin-1"),
        "not valid UTF-8: byte 0xE9",
    ),
    "not_xml.xml": (b"this is plain text, not XML", "malformed XML"),
}


def _write(tmp_path, name, data):
    if data is None:  # a real law file cut off half-way
        data = (FIXTURES / "bwb" / "toestand_wet_fictief.xml").read_bytes()[:1500]
    p = tmp_path / name
    p.write_bytes(data)
    return p


@pytest.mark.parametrize("name", sorted(CASES))
def test_each_bad_file_gives_a_clear_error_naming_it(tmp_path, name):
    data, expected = CASES[name]
    path = _write(tmp_path, name, data)
    with pytest.raises(BWBParseError) as err:
        parse_law(path)
    assert expected in str(err.value)
    assert str(path) in str(err.value)


def test_xxe_never_reads_the_file(tmp_path):
    # Even if the DOCTYPE check were bypassed, the parser must not resolve entities.
    from lxml import etree

    from wetqa.corpus.bwb import _parser

    root = etree.fromstring(XXE, _parser())
    assert "root:" not in "".join(root.itertext())


def test_build_lists_failures_and_builds_the_rest(tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    shutil.copy(FIXTURES / "bwb" / "toestand_wet_fictief.xml", src)
    for name, (data, _) in CASES.items():
        _write(src, name, data)
    report = build_corpus([src], tmp_path / "out", BuildOptions(workers=1), progress=False)
    assert report.laws == 1
    assert sorted(f.file.rsplit("/", 1)[-1] for f in report.failures) == sorted(CASES)
    manifest = json.loads((tmp_path / "out" / "manifest.json").read_text())
    assert len(manifest["failures"]) == len(CASES)
    with pytest.raises(CorpusBuildError, match="--strict"):
        build_corpus([src], tmp_path / "strict", BuildOptions(workers=1, strict=True), progress=False)
    assert not (tmp_path / "strict").exists()


def test_build_with_nothing_usable_fails_clearly(tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    _write(src, "empty.xml", b"")
    with pytest.raises(CorpusBuildError, match="no law could be built"):
        build_corpus([src], tmp_path / "out", BuildOptions(workers=1), progress=False)
    empty = tmp_path / "empty-folder"
    empty.mkdir()
    with pytest.raises(CorpusBuildError, match="no .xml law files"):
        build_corpus([empty], tmp_path / "o", progress=False)
    with pytest.raises(CorpusBuildError, match="source not found"):
        build_corpus([tmp_path / "missing"], tmp_path / "o", progress=False)


# ---------------------------------------------------------------- odd files in a downloaded folder
@pytest.mark.unit
def test_odd_names_links_fifos_and_folders_are_reported_not_fatal(tmp_path):
    import os

    from wetqa.corpus import BuildOptions, build_corpus

    src = tmp_path / "src"
    src.mkdir()
    law = (FIXTURES / "bwb" / "toestand_wet_fictief.xml").read_bytes()
    (src / "BWBR9990001_2024-01-01_0.xml").write_bytes(law)
    (src / os.fsdecode(b"bad\xffname.xml")).write_bytes(law)  # a name that is not UTF-8
    (src / "gone.xml").symlink_to(src / "nowhere.xml")
    os.mkfifo(src / "pipe.xml")
    (src / "folder.xml").mkdir()
    report = build_corpus([src], tmp_path / "out", BuildOptions(workers=1), progress=False)
    assert report.laws == 1
    problems = {f.file: f.problem for f in report.failures}
    assert any("not valid UTF-8" in p for p in problems.values())
    skipped = {s["file"]: s["reason"] for s in report.skipped}
    assert skipped == {"gone.xml": "a link to nothing", "pipe.xml": "not a regular file", "folder.xml": "a folder"}
    manifest = json.loads((tmp_path / "out" / "manifest.json").read_text())
    assert len(manifest["skipped"]) == 3


@pytest.mark.unit
def test_the_same_law_twice_is_built_once(tmp_path):
    from wetqa.corpus import BuildOptions, build_corpus, load_chunks

    src = tmp_path / "src"
    src.mkdir()
    law = (FIXTURES / "bwb" / "toestand_wet_fictief.xml").read_bytes()
    (src / "BWBR9990001_2024-01-01_0.xml").write_bytes(law)  # an older generation of one version
    (src / "BWBR9990001_2024-01-01_2.xml").write_bytes(law)  # the newest: kept
    (src / "kopie.xml").write_bytes(law)  # the same law under another name
    report = build_corpus([src], tmp_path / "out", BuildOptions(workers=1), progress=False)
    assert report.laws == 1
    dup = {d["file"]: d for d in report.duplicates}
    assert set(dup) == {"BWBR9990001_2024-01-01_0.xml", "kopie.xml"}
    assert all(d["kept"] == "BWBR9990001_2024-01-01_2.xml" for d in dup.values())
    ids = [c.id for c in load_chunks(tmp_path / "out")]
    assert len(ids) == len(set(ids))  # no stable id twice


def test_a_file_over_the_size_cap_is_skipped_with_a_clear_message(tmp_path):
    from wetqa.cli import main

    src = tmp_path / "src"
    src.mkdir()
    shutil.copy(FIXTURES / "bwb" / "toestand_wet_fictief.xml", src)
    big = src / "BWBR9990009_2024-01-01_0.xml"
    big.write_bytes(b"<toestand>" + b"<!-- padding -->" * 200_000 + b"</toestand>")  # 3.2 MB
    report = build_corpus([src], tmp_path / "out", BuildOptions(workers=1, max_file_mb=1), progress=False)
    assert report.laws == 1
    assert [(f.file.rsplit("/", 1)[-1], f.problem) for f in report.failures] == [
        (big.name, "larger than the 1 MB cap (--max-file-mb); skipped")
    ]
    argv = ["corpus", "build", "--source", str(src), "--out", str(tmp_path / "o2"), "--workers", "1"]
    assert main([*argv, "--max-file-mb", "1", "--no-progress"]) == 1


def test_file_names_with_terminal_escapes_or_newlines_are_printed_escaped(tmp_path, capsys):
    from wetqa.cli import main

    src = tmp_path / "src"
    src.mkdir()
    shutil.copy(FIXTURES / "bwb" / "toestand_wet_fictief.xml", src)
    (src / "evil\x1b[2J\x1b[31mred\nfake line.xml").write_bytes(b"<not xml")
    (src / "gone\rback.xml").symlink_to(src / "nothing-there")
    assert main(["corpus", "build", "--source", str(src), "--out", str(tmp_path / "out"), "--no-progress"]) == 1
    out, err = capsys.readouterr()
    shown = out + err
    assert "\x1b" not in shown and "\r" not in shown
    assert "evil\\x1b[2J\\x1b[31mred\\nfake line.xml" in shown and "gone\\rback.xml" in shown
    assert not any(line.startswith("fake line.xml") for line in shown.splitlines())
