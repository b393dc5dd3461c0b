import json
import statistics

import numpy as np
import pytest

from wetqa.corpus import BuildOptions, build_corpus, load_chunks
from wetqa.evaluation import load_dataset
from wetqa.retrieval import RetrievalError, build_index, open_index, open_retriever
from wetqa.retrieval.engines.tokenization import DutchAnalyzer
from wetqa.retrieval.models.encoders import SentenceTransformerEncoder, prefixes

from .conftest import DEV, FIXTURES
from .tiny_models import tiny_sentence_transformer

QUESTION = "Wanneer kan de rechtbank het gezag van een ouder beëindigen?"


@pytest.mark.unit
def test_dutch_analyzer_matches_lucene_dutch():
    a = DutchAnalyzer()
    # Stop words out, Porter-style Dutch stems, stem overrides, numbers with dots whole.
    assert a.tokens("De rechtbank kan het gezag van een ouder beëindigen") == [
        "rechtbank",
        "gezag",
        "ouder",
        "beeindig",
    ]
    assert a.tokens("Artikel 7.3.12 van de wet") == ["artikel", "7.3.12", "wet"]
    assert a.tokens("kinderen kind fiets") == ["kinder", "kinder", "fiets"]


@pytest.mark.integration
def test_dutch_analyzer_equals_lucenes_on_the_dev_questions():
    pytest.importorskip("pyserini")
    from wetqa.retrieval.engines.pyserini_backend import _import_searcher

    _import_searcher()  # starts the JVM the wetqa way
    from pyserini.analysis import Analyzer, get_lucene_analyzer

    lucene = Analyzer(get_lucene_analyzer(language="nl"))
    ours = DutchAnalyzer()
    texts = [i.question for i in load_dataset(DEV)] + [i.answer for i in load_dataset(DEV)]
    same = sum(lucene.analyze(t) == ours.tokens(t) for t in texts)
    # Lucene's tokenizer splits a few rare forms differently (e.g. "7:271"); the rest must be equal.
    assert same / len(texts) >= 0.9, same


@pytest.mark.unit
def test_bm25s_index_search_and_rebuild_only_when_changed(fixture_corpus, tmp_path):
    out = tmp_path / "idx"
    meta = build_index(fixture_corpus, "bm25s", out, progress=False)
    assert meta["rebuilt"] and meta["chunks"] == 8
    hits = open_index(out).search(QUESTION, k=3)
    assert hits[0].chunk.article == "Artikel 266" and hits[0].rank == 1
    assert [h.rank for h in hits] == list(range(1, len(hits) + 1))
    assert build_index(fixture_corpus, "bm25s", out, progress=False)["rebuilt"] is False
    assert build_index(fixture_corpus, "bm25s", out, {"k1": 1.2}, progress=False)["rebuilt"] is True
    assert open_index(out).search("zzzonbekendwoord", k=3) == []  # no known term: no hits, no error


@pytest.mark.unit
def test_stale_and_missing_index_and_bad_input(fixture_corpus, tmp_path):
    out = tmp_path / "idx"
    build_index(fixture_corpus, "bm25s", out, progress=False)
    other = tmp_path / "other-corpus"
    build_corpus([FIXTURES / "bwb" / "toestand_wet_fictief.xml"], other, BuildOptions(workers=1), progress=False)
    with pytest.raises(RetrievalError, match="stale index"):
        open_index(out, corpus_dir=other)
    with pytest.raises(RetrievalError, match="no index at"):
        open_index(tmp_path / "missing")
    r = open_index(out)
    with pytest.raises(RetrievalError, match="empty query"):
        r.search("   ", 3)
    with pytest.raises(RetrievalError, match="k must be a positive"):
        r.search("gezag", 0)
    with pytest.raises(RetrievalError, match="unknown retriever 'tfidf'"):
        build_index(fixture_corpus, "tfidf", tmp_path / "x", progress=False)
    with pytest.raises(RetrievalError, match="unknown option"):
        build_index(fixture_corpus, "bm25s", tmp_path / "x", {"model": "e5"}, progress=False)


@pytest.mark.unit
def test_failed_rebuild_keeps_the_old_index(fixture_corpus, tmp_path, monkeypatch):
    out = tmp_path / "idx"
    build_index(fixture_corpus, "bm25s", out, progress=False)
    from wetqa.retrieval.engines import bm25s_backend

    def boom(*a, **k):
        raise RuntimeError("killed mid-build")

    monkeypatch.setattr(bm25s_backend.BM25sBuilder, "finish", boom)
    with pytest.raises(RuntimeError):
        build_index(fixture_corpus, "bm25s", out, {"k1": 2.0}, progress=False)
    assert open_index(out).search(QUESTION, 1)[0].chunk.article == "Artikel 266"
    assert json.loads((out / "index.json").read_text())["options"]["k1"] == 0.9


@pytest.mark.unit
def test_dense_with_a_tiny_bert_built_here(fixture_corpus, tmp_path):
    model = tiny_sentence_transformer(tmp_path / "model", [c.text for c in load_chunks(fixture_corpus)])
    out = tmp_path / "dense"
    meta = build_index(fixture_corpus, "dense", out, {"model": str(model), "batch_size": 3}, progress=False)
    r = open_index(out, rescore=False)
    emb = np.asarray(r.embeddings)
    assert emb.dtype == np.float16 and emb.shape == (8, 32)
    assert np.allclose(np.linalg.norm(emb.astype(np.float32), axis=1), 1.0, atol=1e-2)
    hits = r.search(QUESTION, k=4)
    assert len(hits) == 4 and hits[0].score >= hits[-1].score
    # Length-sorted batching must not scramble which vector belongs to which chunk.
    enc = SentenceTransformerEncoder(str(model), batch_size=3)
    texts = [c.text for c in r.chunks]
    one_by_one = np.stack([enc.encode_passages([t])[0] for t in texts])
    assert np.allclose(enc.encode_passages(texts), one_by_one, atol=1e-4)
    assert meta["options"]["model"] == str(model)


@pytest.mark.unit
def test_model_family_prefixes():
    assert prefixes("intfloat/multilingual-e5-large") == ("query: ", "passage: ")
    assert prefixes("intfloat/multilingual-e5-small") == ("query: ", "passage: ")
    assert prefixes("sentence-transformers/paraphrase-multilingual-MiniLM-L12-v2") == ("", "")


@pytest.mark.unit
def test_unknown_dense_model_is_a_clear_error(fixture_corpus, tmp_path):
    with pytest.raises(RetrievalError, match="cannot load embedding model 'no-such/model'"):
        build_index(fixture_corpus, "dense", tmp_path / "d", {"model": "no-such/model"}, progress=False)


@pytest.mark.unit
def test_hybrid_over_two_indexes(fixture_corpus, tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    build_index(fixture_corpus, "bm25s", a, progress=False)
    build_index(fixture_corpus, "bm25s", b, {"k1": 1.5, "b": 0.9}, progress=False)
    h = open_retriever([a, b], fusion="rrf")
    assert h.search(QUESTION, 2)[0].chunk.article == "Artikel 266"
    w = open_retriever([a, b], fusion="interpolate", weights=[0.7, 0.3])
    assert w.search(QUESTION, 2)[0].chunk.article == "Artikel 266"
    with pytest.raises(RetrievalError, match="1 weights for 2 indexes"):
        open_retriever([a, b], fusion="interpolate", weights=[1.0])


@pytest.mark.integration
def test_pyserini_and_bm25s_agree_on_the_dev_questions(real_corpus, real_bm25s_index, real_bm25_index, tmp_path):
    from wetqa.retrieval import read_index_meta

    assert read_index_meta(real_bm25_index)["options"]["language"] == "nl"
    questions = [i.question for i in load_dataset(DEV)]
    a = open_index(real_bm25s_index).batch_search(questions, 10, threads=2)
    b = open_index(real_bm25_index).batch_search(questions, 10, threads=2)
    overlap = [len({h.id for h in x} & {h.id for h in y}) / 10 for x, y in zip(a, b)]
    assert statistics.mean(overlap) >= 0.9, overlap
    top1 = sum(x[0].id == y[0].id for x, y in zip(a, b)) / len(questions)
    assert top1 >= 0.9
    # RM3 pseudo-relevance feedback is an index option that reaches Anserini's searcher.
    meta = build_index(real_corpus, "bm25", tmp_path / "rm3", {"rm3": [10, 10, 0.5]}, progress=False)
    assert meta["options"]["rm3"] == [10, 10, 0.5]
    c = open_index(tmp_path / "rm3").batch_search(questions, 10, threads=2)
    assert sum([h.id for h in x] != [h.id for h in y] for x, y in zip(b, c)) >= len(questions) // 2


@pytest.mark.unit
def test_chunks_behind_any_retriever(fixture_corpus, tmp_path):
    from wetqa.retrieval import chunks_of

    build_index(fixture_corpus, "bm25s", tmp_path / "a", progress=False)
    base = open_index(tmp_path / "a")
    assert chunks_of(base) is base.chunks
    hybrid = open_retriever([tmp_path / "a", tmp_path / "a"])
    assert [c.id for c in chunks_of(hybrid)] == [c.id for c in base.chunks]  # its first component's chunks

    from wetqa.retrieval import RetrieverBase

    class Wrapped(RetrieverBase):  # a retriever of one's own declares the chunks behind its hits
        name = "wrapped"
        chunks = base.chunks

    assert chunks_of(Wrapped()) is base.chunks

    class Bare(RetrieverBase):
        name = "bare"

    with pytest.raises(RetrievalError, match="declares no chunks"):
        chunks_of(Bare())


@pytest.mark.unit
def test_top_k_equals_bm25s_scores_with_ties_broken_by_position():
    import random

    import bm25s

    from wetqa.retrieval.kernels.selection import ImpactIndex, top_k_dense

    rng = random.Random(7)
    words = [f"w{i}" for i in range(40)]
    docs = [[rng.choice(words) for _ in range(rng.randint(1, 12))] for _ in range(300)]
    docs += docs[:60]  # duplicate documents: equal scores, so ties decide the order
    model = bm25s.BM25(k1=0.9, b=0.4, method="lucene")
    model.index(docs, show_progress=False)
    s = model.scores
    index = ImpactIndex(s["data"], s["indices"], s["indptr"], int(s["num_docs"]))
    vocab = model.vocab_dict
    for _ in range(300):
        terms = [vocab[rng.choice(words)] for _ in range(rng.randint(1, 6))]
        terms += terms[:1]  # a repeated query term counts twice, as in bm25s
        reference = model.get_scores_from_ids(terms)
        expected = sorted((d for d in range(len(docs)) if reference[d] > 0), key=lambda d: (-reference[d], d))
        for k in (1, 3, 10, 500):
            got_docs, got_scores = top_k_dense(index, terms, k)
            assert got_docs.tolist() == expected[:k]
            assert got_scores.tobytes() == reference[expected[:k]].tobytes()  # bit for bit


@pytest.mark.unit
def test_streamed_impacts_equal_bm25s_bit_for_bit(tmp_path, monkeypatch):
    """The index builder's impacts (streamed, placed block by block) against bm25s' own arrays."""
    import random

    import bm25s

    from wetqa.retrieval.kernels import impacts
    from wetqa.retrieval.kernels.impacts import ImpactBuilder, Vocabulary, load_view

    # Tiny buffers and blocks, so that flushing and block boundaries are exercised.
    monkeypatch.setattr(impacts, "_FLUSH_PAIRS", 37)
    monkeypatch.setattr(impacts, "_BLOCK_PAIRS", 53)
    rng = random.Random(11)
    words = [f"w{i}" for i in range(80)]
    docs = [[rng.choice(words) for _ in range(rng.randint(0, 30))] for _ in range(400)]
    docs[5] = []  # an empty document counts in N and in the mean length
    model = bm25s.BM25(k1=0.9, b=0.4, method="lucene")
    model.index(docs, show_progress=False)
    vocab = Vocabulary()
    builder = ImpactBuilder(tmp_path, "view", 0.9, 0.4)
    for d in docs:
        builder.add(vocab.ids_of(d))
    builder.finish(len(vocab))
    mine = load_view(tmp_path, "view")
    theirs = model.scores
    for term, ref_id in model.vocab_dict.items():
        if term not in vocab.ids:
            continue
        a, b = theirs["indptr"][ref_id], theirs["indptr"][ref_id + 1]
        docs_ref, data_ref = theirs["indices"][a:b], theirs["data"][a:b]
        got_docs, got_data = mine.postings(vocab.ids[term])
        assert np.asarray(got_docs).tolist() == docs_ref.tolist(), term
        assert np.asarray(got_data).tobytes() == data_ref.tobytes(), term  # bit for bit
    assert mine.num_docs == len(docs) and not list(tmp_path.glob(".*.tmp"))


@pytest.mark.integration
def test_pyserini_from_many_threads_at_once(real_bm25_index):
    """Without the lock this failed: 8 of 4,000 calls raised IncompatibleClassChangeError on the real corpus."""
    from concurrent.futures import ThreadPoolExecutor

    r = open_index(real_bm25_index)
    questions = [i.question for i in load_dataset(DEV)]
    expected = {q: [h.id for h in r.search(q, k=3)] for q in questions}

    def work(i):
        q = questions[i % len(questions)]
        hits = r.batch_search([q], 3)[0] if i % 2 else r.search(q, k=3)
        return [h.id for h in hits] == expected[q]

    with ThreadPoolExecutor(16) as pool:
        assert all(pool.map(work, range(4000)))


@pytest.mark.unit
def test_a_pipelines_first_stage_searches_a_batch_with_the_threads_asked(bm25s_index, monkeypatch):
    """`eval retrieval --threads N` reaches the first stage's search (the pipeline passed 1 whatever was asked)."""
    from wetqa.retrieval import RetrievalSpec
    from wetqa.retrieval.ranking import stages

    pipeline = RetrievalSpec(index=(str(bm25s_index),), reader="none").build()
    seen: list[int] = []
    real = stages.search_in

    def spy(retriever, questions, k, threads, scope):
        seen.append(threads)
        return real(retriever, questions, k, threads, scope)

    monkeypatch.setattr(stages, "search_in", spy)
    questions = ["gezag ouder", "verblijfsvergunning vreemdeling", "rechter beëindigen"]
    many = pipeline.batch_search(questions, k=3, threads=2)
    one = pipeline.batch_search(questions, k=3)
    assert seen == [2, 1]
    assert [[h.id for h in hits] for hits in many] == [[h.id for h in hits] for hits in one]


@pytest.mark.unit
def test_fused_article_hits_keep_their_article(articles_index, fixture_corpus, tmp_path, capsys):
    # A defect hunt: two articles indexes fused gave hits without their article's paragraphs, so the
    # extractive answer ran two articles' texts together with no "law, article:" lead to tell them apart.
    from wetqa.cli import main

    other = tmp_path / "other"
    build_index(fixture_corpus, "articles", other, {"heading_weight": 0.0}, progress=False)
    single = open_index(articles_index).search(QUESTION, 3)
    for fusion in ("rrf", "interpolate"):
        fused = open_retriever([articles_index, other], fusion=fusion).search(QUESTION, 3)
        top = next(h for h in single if h.id == fused[0].id)
        assert fused[0].article_paragraphs == top.article_paragraphs and fused[0].article_chunks == top.article_chunks
    assert main(["ask", QUESTION, "--index", str(articles_index), "--index", str(other)]) == 0
    assert capsys.readouterr().out.startswith("Wet fictief gezag, Artikel 266:\n")


@pytest.mark.unit
def test_fused_hits_keep_their_article_whichever_index_comes_first(articles_index, bm25s_index):
    # The review: the article came from the first ranking that had the hit, so a chunk index listed first
    # lost it.
    article_first = open_retriever([articles_index, bm25s_index]).search(QUESTION, 3)
    chunk_first = open_retriever([bm25s_index, articles_index]).search(QUESTION, 3)
    with_article = {h.id: h for h in article_first if h.article_paragraphs}
    shared = [h for h in chunk_first if h.id in with_article]
    assert shared and all(h.article_paragraphs == with_article[h.id].article_paragraphs for h in shared)
