"""Retrieval metrics: hand-computed cases and the real dev set."""

import pytest

from wetqa.corpus.dataset import DatasetError, GoldArticle, QAItem
from wetqa.corpus.records import Chunk
from wetqa.evaluation import evaluate_retrieval, load_dataset
from wetqa.retrieval import Hit, interpolate, open_index, rrf

from .conftest import DEV


def _chunk(bwb, art, part=1):
    return Chunk(
        id=f"{bwb}_{art}_{part}",
        doc_id="DOC",
        law_id=bwb,
        version_date="2024-01-01",
        law="L",
        article=f"Artikel {art}",
        part=part,
        text="t",
    )


def _hits(chunks):
    return [Hit(c, 10.0 - i, i + 1) for i, c in enumerate(chunks)]


@pytest.mark.unit
def test_chunk_and_article_metrics_by_hand():
    a1, a2, b1, c1, d1 = _chunk("X", 1, 1), _chunk("X", 1, 2), _chunk("X", 2), _chunk("X", 3), _chunk("X", 4)
    chunks = [a1, a2, b1, c1, d1]
    items = [
        QAItem("q1", "?", articles=[GoldArticle("X", "Artikel 1")]),  # gold: chunks a1, a2
        QAItem("q2", "?", articles=[GoldArticle("X", "Artikel 4")]),  # gold: d1, never retrieved
        QAItem("q3", "?", articles=[GoldArticle("X", "Artikel 2")]),  # no hits at all
    ]
    results = {"q1": _hits([b1, a2, c1, a1]), "q2": _hits([b1, c1]), "q3": []}
    m = evaluate_retrieval(items, results, chunks, ks=[1, 3])
    ch, ar = m["chunk"], m["article"]
    # q1: top-3 chunks hold a2 of {a1, a2} -> R@3 1/2; first relevant at rank 2 -> RR 1/2.
    assert ch["R@1"] == 0.0 and ch["R@3"] == round(0.5 / 3, 4)
    assert ch["Hit@3"] == round(1 / 3, 4)
    assert ch["MRR"] == round(0.5 / 3, 4)
    # Article level: q1's ranking is [X2, X1, X3] -> article 1 at rank 2.
    assert ar["R@1"] == 0.0 and ar["R@3"] == round(1 / 3, 4) and ar["MRR"] == round(0.5 / 3, 4)
    assert m["n_questions"] == 3  # q3 (no hits) counts as zero, not dropped


@pytest.mark.unit
def test_fusion_by_hand():
    a, b, c = _chunk("X", 1), _chunk("X", 2), _chunk("X", 3)
    fused = rrf([_hits([a, b]), _hits([b, c])], k=3, rrf_k=60)
    assert [h.chunk.article for h in fused] == ["Artikel 2", "Artikel 1", "Artikel 3"]
    assert fused[0].score == pytest.approx(1 / 62 + 1 / 61)
    x = [Hit(a, 10, 1), Hit(b, 5, 2), Hit(c, 0, 3)]
    y = [Hit(c, 3, 1), Hit(a, 1, 2)]
    inter = interpolate([x, y], [0.5, 0.5], k=3)
    # a: .5*1 + .5*0 = .5; b: .5*.5 = .25; c: .5*0 + .5*1 = .5 -> tie a/c broken by id.
    assert [(h.chunk.article, round(h.score, 3)) for h in inter] == [
        ("Artikel 1", 0.5),
        ("Artikel 3", 0.5),
        ("Artikel 2", 0.25),
    ]


@pytest.mark.unit
def test_dataset_errors(tmp_path):
    p = tmp_path / "d.jsonl"
    p.write_text('{"id": 1, "question": "a?"}\n{"id": 1, "question": "b?"}\n')
    with pytest.raises(DatasetError, match="duplicate question id '1'"):
        load_dataset(p)
    p.write_text('{"id": 1, "question": ""}\n')
    with pytest.raises(DatasetError, match=":1: question: String should have at least 1 character"):
        load_dataset(p)
    p.write_text("{not json\n")
    with pytest.raises(DatasetError, match="not a JSON object line"):
        load_dataset(p)
    # Types are checked at the boundary: these used to become the questions "None" and "5".
    for line, where in [
        ('{"question": null}', "question"),
        ('{"question": 5}', "question"),
        ('{"question": "q?", "articles": [{"law_id": null, "article": 5}]}', "articles.0.law_id"),
        ("[1, 2]", "record"),
    ]:
        p.write_text(line + "\n")
        with pytest.raises(DatasetError, match=rf":1: {where}"):
            load_dataset(p)
    with pytest.raises(DatasetError, match="dataset not found"):
        load_dataset(tmp_path / "missing.jsonl")


@pytest.mark.integration
def test_bm25s_on_the_dev_questions_near_the_published_figures(real_bm25s_index):
    """Raw Pyserini over the published chunks: chunk R@3 .499 R@10 .617 Hit@3 .765; article R@3 .765."""
    r = open_index(real_bm25s_index)
    items = load_dataset(DEV)
    hits = r.batch_search([i.question for i in items], 10)
    m = evaluate_retrieval(items, {i.id: h for i, h in zip(items, hits)}, r.chunks)
    assert abs(m["chunk"]["R@3"] - 0.499) <= 0.05
    assert abs(m["chunk"]["R@10"] - 0.617) <= 0.05
    assert abs(m["chunk"]["Hit@3"] - 0.765) <= 0.05
    assert abs(m["article"]["R@3"] - 0.765) <= 0.05


@pytest.mark.unit
def test_a_dataset_that_is_not_utf8_names_its_file_and_line(tmp_path, articles_index, capsys):
    """Issue 40: an invalid byte gave the codec's bare "'utf-8' codec can't decode byte 0xff in position ..."."""
    from wetqa.cli import main

    p = tmp_path / "d.jsonl"
    p.write_bytes(b'{"id": 1, "question": "Wanneer eindigt het gezag?"}\n{"id": 2, "question": "gezag \xff?"}\n')
    with pytest.raises(DatasetError, match=rf"^{p}:2: not UTF-8 text"):
        load_dataset(p)
    for command in (
        ["eval", "retrieval", "--dataset", str(p), "--index", str(articles_index), "--out", str(tmp_path / "e")],
        ["generate", "--dataset", str(p), "--index", str(articles_index), "--out", str(tmp_path / "g")],
    ):
        capsys.readouterr()
        assert main(command) == 2
        err = capsys.readouterr().err.strip()
        assert err.startswith(f"wetqa: error: {p}:2: not UTF-8 text") and len(err.splitlines()) == 1, err


@pytest.mark.unit
def test_a_question_without_gold_articles_is_named_not_scored_zero(tmp_path, articles_index, capsys):
    """Bug: `eval retrieval` scored a question without gold articles as a miss (0 in every mean), exit 0."""
    import json

    from wetqa.cli import main

    p = tmp_path / "d.jsonl"
    rows = [
        {
            "id": "a",
            "question": "Wanneer eindigt het gezag?",
            "articles": [{"law_id": "BWBR9990001", "article": "Artikel 2"}],
        },
        {"id": "b", "question": "Wat zegt deze wet?", "laws": ["BWBR9990001"]},
    ]
    p.write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = tmp_path / "e"
    assert main(["eval", "retrieval", "--dataset", str(p), "--index", str(articles_index), "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "question b names no gold article" in err, err
    assert not out.exists()


@pytest.mark.unit
def test_a_dataset_saved_with_a_byte_order_mark_is_read(tmp_path):
    # A defect hunt: a file saved by a Windows editor as "UTF-8 with BOM" was refused at line 1 as "not a
    # JSON object line". The mark says the file is UTF-8; the questions are read as written.
    p = tmp_path / "bom.jsonl"
    p.write_bytes(
        b'\xef\xbb\xbf{"id": "1", "question": "Wanneer eindigt het gezag?"}\n{"id": "2", "question": "En dan?"}\n'
    )
    assert [(i.id, i.question) for i in load_dataset(p)] == [("1", "Wanneer eindigt het gezag?"), ("2", "En dan?")]
    p.write_bytes(b'{"id": "1", "question": "Wanneer?"}\n\xef\xbb\xbf{"id": "2", "question": "En?"}\n')
    with pytest.raises(DatasetError, match=rf"^{p}:2: not a JSON object line"):  # only a file's first bytes
        load_dataset(p)


@pytest.mark.unit
def test_eval_retrieval_says_when_gold_articles_lie_outside_the_index(tmp_path, articles_index, capsys):
    # A defect hunt: gold articles of a law the index does not hold were counted as misses without a word.
    import json

    from wetqa.cli import main

    p = tmp_path / "d.jsonl"
    rows = [
        {"id": "in", "question": "Wanneer eindigt het gezag?", "articles": [{"bwb_id": "BWBR9990001", "article": "Artikel 266"}]},
        {"id": "out", "question": "Wanneer eindigt de huur?", "articles": [{"bwb_id": "BWBR9999999", "article": "Artikel 1"}]},
    ]  # fmt: skip
    p.write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert (
        main(["eval", "retrieval", "--dataset", str(p), "--index", str(articles_index), "--out", str(tmp_path / "e")])
        == 0
    )
    err = capsys.readouterr().err
    assert "warning: 1 of 2 questions ask about laws the index does not hold" in err and "out (BWBR9999999)" in err, err
    metrics = json.loads((tmp_path / "e" / "metrics.json").read_text())
    assert metrics["gold_outside_index"] == ["out"]


@pytest.mark.unit
@pytest.mark.parametrize("k", ["1,,3", ",", "3,"])
def test_an_empty_cut_off_is_refused(k, tmp_path, articles_index, capsys):
    # A defect hunt: "-k 1,,3" was read as 1,3 while "--kind ," was refused as an empty value.
    from wetqa.cli import main

    assert main(["eval", "retrieval", "--dataset", str(DEV), "--index", str(articles_index), "-k", k]) == 2
    assert "an empty value" in capsys.readouterr().err
