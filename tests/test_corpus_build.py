import json
import os
import signal
import subprocess
import sys
import time

import pytest

from wetqa.corpus import BuildOptions, build_corpus, load_chunks, read_manifest
from wetqa.corpus.build import CHUNKS
from wetqa.corpus.sources import law_id_of

from .conftest import BWB_DIR, DEV, FIXTURES, ROOT


@pytest.mark.unit
def test_build_writes_articles_chunks_manifest(fixture_corpus):
    manifest = read_manifest(fixture_corpus)
    assert manifest["counts"] == {"laws": 2, "articles": 6, "expired_articles": 2, "chunks": 8}
    assert [s["law_id"] for s in manifest["sources"]] == ["BWBR9990001", "BWBR9990002"]  # sorted by file name
    assert all(len(s["sha256"]) == 64 for s in manifest["sources"])
    assert manifest["options"]["chunking"]["strategy"] == "words150"
    chunks = load_chunks(fixture_corpus)
    first = chunks[0]
    assert (first.doc_id, first.law_id, first.law, first.article) == (
        "DOC0001",
        "BWBR9990001",
        "Wet fictief gezag",
        "Artikel 266",
    )
    rows = [json.loads(l) for l in (fixture_corpus / "articles.jsonl").read_text().splitlines()]
    assert {"law_id", "law", "article", "path", "text"} <= rows[0].keys()


@pytest.mark.unit
def test_the_corpus_files_name_a_bwb_law_by_bwb_id_beside_law_id(fixture_corpus, tmp_path):
    """Issue 40: articles.jsonl and chunks.jsonl renamed bwb_id to law_id at once, and scripts that read
    them by bwb_id broke. A BWB record carries both; a corpus written with law_id alone still loads."""
    import shutil

    from wetqa.retrieval import build_index, open_index

    for name in ("articles.jsonl", "chunks.jsonl"):
        rows = [json.loads(line) for line in (fixture_corpus / name).read_text(encoding="utf-8").splitlines()]
        assert rows and all(r["bwb_id"] == r["law_id"] for r in rows), name
        assert list(rows[0]).index("bwb_id") == list(rows[0]).index("law_id") + 1, rows[0]  # right beside it
    old = tmp_path / "corpus"
    shutil.copytree(fixture_corpus, old)
    for name in ("articles.jsonl", "chunks.jsonl"):  # as the corpora of before wrote them
        path = old / name
        rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
        path.write_text("".join(json.dumps({k: v for k, v in r.items() if k != "bwb_id"}) + "\n" for r in rows))
    assert [c.law_id for c in load_chunks(old)] == [c.law_id for c in load_chunks(fixture_corpus)]
    build_index(old, "articles", tmp_path / "index", progress=False)
    hit = open_index(tmp_path / "index").search("gezag van een ouder beëindigen", k=1)[0]
    assert (hit.chunk.law_id, hit.chunk.article) == ("BWBR9990001", "Artikel 266")


@pytest.mark.unit
def test_technical_law_filter(tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    data = (FIXTURES / "bwb" / "toestand_wet_fictief.xml").read_text(encoding="utf-8")
    (src / "a.xml").write_text(data, encoding="utf-8")
    (src / "b.xml").write_text(
        data.replace("BWBR9990001", "BWBR9990009").replace("Wet fictief gezag", "Invoeringswet fictief gezag"),
        encoding="utf-8",
    )
    report = build_corpus([src], tmp_path / "out", BuildOptions(exclude_technical=True, workers=1), progress=False)
    assert report.laws == 1
    assert report.excluded == [
        {"file": "b.xml", "law_id": "BWBR9990009", "title": "Invoeringswet fictief gezag", "word": "invoeringswet"}
    ]


@pytest.mark.unit
def test_rebuild_replaces_atomically_and_a_failed_build_keeps_the_old(tmp_path, monkeypatch):
    out = tmp_path / "corpus"
    build_corpus([FIXTURES / "bwb"], out, BuildOptions(workers=1), progress=False)
    before = (out / CHUNKS).read_bytes()

    import wetqa.corpus.build as build_mod

    def boom(*a, **k):
        raise RuntimeError("disk on fire")

    monkeypatch.setattr(build_mod, "chunk_articles", boom)
    with pytest.raises(RuntimeError, match="disk on fire"):
        build_corpus([FIXTURES / "bwb"], out, BuildOptions(workers=1), progress=False)
    assert (out / CHUNKS).read_bytes() == before
    assert [p.name for p in tmp_path.iterdir()] == ["corpus"]  # no temp folder left behind


@pytest.mark.integration
def test_killed_build_leaves_previous_corpus_intact(tmp_path):
    out = tmp_path / "corpus"
    build_corpus([FIXTURES / "bwb"], out, BuildOptions(workers=1), progress=False)
    before = (out / "manifest.json").read_bytes()
    if not BWB_DIR.is_dir():
        pytest.skip("needs the shared corpus for a build long enough to kill")
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "wetqa.corpus",
            "build",
            "--source",
            str(BWB_DIR),
            "--out",
            str(out),
            "--workers",
            "1",
            "--no-progress",
        ],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    time.sleep(1.5)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    assert (out / "manifest.json").read_bytes() == before
    assert len(load_chunks(out)) == 8


@pytest.mark.integration
def test_real_corpus_counts_and_gold_articles(real_corpus):
    manifest = read_manifest(real_corpus)
    counts = manifest["counts"]
    assert manifest["failures"] == []
    assert counts["laws"] == 272
    # Published without Boek 7: 21,563 articles, 29,426 words150 chunks; within 5%.
    assert abs(counts["articles"] - 21563) / 21563 < 0.05
    assert abs(counts["chunks"] - 29426) / 29426 < 0.05
    chunks = load_chunks(real_corpus)
    keys = {(c.law_id, c.article) for c in chunks}
    gold = [(law_id_of(a), a["article"]) for line in DEV.read_text().splitlines() for a in json.loads(line)["articles"]]
    assert gold and [g for g in gold if g not in keys] == []
    assert len({c.id for c in chunks}) == len(chunks)
    assert max(len(c.text.split()) for c in chunks) == 150
