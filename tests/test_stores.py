"""Indexes on disk and the query-time encoder without torch: what they give, and how damage is refused."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest

from wetqa.corpus import load_chunks
from wetqa.retrieval import RetrievalError, build_index, open_index
from wetqa.retrieval.engines.integrity import file_digests

from .conftest import FIXTURES
from .tiny_models import tiny_unigram_sentence_transformer

pytestmark = pytest.mark.unit
QUESTION = "Wanneer kan de rechtbank het gezag van een ouder beëindigen?"


@pytest.fixture(scope="module")
def tiny_e5(fixture_corpus, tmp_path_factory):
    """A tiny unigram-tokenized encoder (the shape of multilingual-E5) and its ONNX export."""
    from wetqa.retrieval.tooling.export import export_onnx

    texts = [c.text for c in load_chunks(fixture_corpus)]
    # A folder name without "e5": no query/passage prefixes, so its vectors compare with plain sentence-transformers.
    model = tiny_unigram_sentence_transformer(tmp_path_factory.mktemp("tiny-unigram") / "m", texts)
    export_onnx(model)
    return model


def test_the_onnx_export_gives_the_vectors_and_ids_of_sentence_transformers(tiny_e5, fixture_corpus):
    from sentence_transformers import SentenceTransformer
    from tokenizers import Tokenizer

    from wetqa.retrieval.models.encoders import make_encoder
    from wetqa.retrieval.models.onnx_encoder import OnnxEncoder

    texts = [c.text for c in load_chunks(fixture_corpus)] + ["één  twee\tdrie", "x <s> y", "a" * 300, ""]
    onnx = make_encoder({"model": str(tiny_e5)})  # auto: the export, not torch
    assert isinstance(onnx, OnnxEncoder)
    st = SentenceTransformer(str(tiny_e5), device="cpu")
    cos = (onnx.encode_passages(texts) * st.encode(texts, normalize_embeddings=True)).sum(1)
    assert cos.min() >= 0.999, cos
    reference = Tokenizer.from_file(str(tiny_e5 / "tokenizer.json"))
    reference.enable_truncation(64)
    assert onnx.tokenizer.encode_batch(texts) == [e.ids for e in reference.encode_batch(texts)]


def test_an_export_beside_other_weights_is_refused(tiny_e5, tmp_path):
    from wetqa.retrieval.models.onnx_encoder import OnnxEncoder

    copy = shutil.copytree(tiny_e5, tmp_path / "m")
    other = tiny_unigram_sentence_transformer(tmp_path / "other", seed=1)
    shutil.copyfile(other / "model.safetensors", copy / "model.safetensors")
    with pytest.raises(RetrievalError, match="exported from other weights"):
        OnnxEncoder(copy)


def test_an_index_refuses_a_rescoring_model_that_is_not_its_own(tiny_e5, fixture_corpus, tmp_path):
    from wetqa.retrieval.tooling.export import export_onnx

    model = shutil.copytree(tiny_e5, tmp_path / "m")
    build_index(fixture_corpus, "articles", tmp_path / "idx", rescore={"model": str(model)}, progress=False)
    assert open_index(tmp_path / "idx").search(QUESTION, k=2)
    # The folder the index names now holds another model, exported too: refused, not searched.
    other = tiny_unigram_sentence_transformer(tmp_path / "other", seed=1)
    shutil.rmtree(model)
    shutil.copytree(other, model)
    export_onnx(model)
    with pytest.raises(RetrievalError, match="probe cosine"):
        open_index(tmp_path / "idx")


def test_opening_reads_no_records_and_hits_read_what_they_return(articles_index):
    r = open_index(articles_index)
    store = r.chunks
    assert len(store) == json.loads((articles_index / "index.json").read_text())["chunks"]
    hits = r.search(QUESTION, k=2)
    assert hits[0].chunk.article == "Artikel 266" and hits[0].article_paragraphs
    row = store.row_of(hits[0].chunk.id)
    assert store[row] == hits[0].chunk and store.by_id("nope") is None
    assert [c.id for c in store] == [c.id for c in store.rows(range(len(store)))]


@pytest.fixture
def index_copy(articles_index, tmp_path):
    return shutil.copytree(articles_index, tmp_path / "idx")


def test_a_truncated_store_is_named_with_the_rebuild_command(index_copy):
    store = index_copy / "store.sqlite"
    store.write_bytes(store.read_bytes()[:4096])
    with pytest.raises(RetrievalError, match=r"damaged index .*store\.sqlite is 4096 bytes.*wetqa index --force"):
        open_index(index_copy)


def test_a_truncated_array_is_named(index_copy):
    view = index_copy / "chunk.data.npy"
    view.write_bytes(b"")
    with pytest.raises(RetrievalError, match=r"chunk\.data\.npy is 0 bytes"):
        open_index(index_copy)


def test_a_store_of_another_corpus_is_refused(index_copy, tmp_path):
    from wetqa.corpus import BuildOptions, ChunkingOptions, build_corpus

    other = build_corpus(
        [FIXTURES / "bwb"],
        tmp_path / "other-corpus",
        BuildOptions(chunking=ChunkingOptions("structured", 200), workers=1),
        progress=False,
    )
    build_index(other.out, "articles", tmp_path / "other", progress=False)
    shutil.copyfile(tmp_path / "other" / "store.sqlite", index_copy / "store.sqlite")
    meta = json.loads((index_copy / "index.json").read_text())
    meta["files"] = file_digests(index_copy)  # listed as if built so: the store's own check is what is tried
    (index_copy / "index.json").write_text(json.dumps(meta))
    with pytest.raises(RetrievalError, match="records corpus_hash .*another corpus"):
        open_index(index_copy)


def test_an_index_of_an_older_wetqa_names_the_rebuild(index_copy):
    meta = json.loads((index_copy / "index.json").read_text())
    del meta["format"]
    (index_copy / "index.json").write_text(json.dumps(meta))
    with pytest.raises(RetrievalError, match="built by an older wetqa .*wetqa index --force"):
        open_index(index_copy)


def test_a_dense_search_over_the_memory_map_equals_a_full_scan(tiny_e5, fixture_corpus, tmp_path, monkeypatch):
    from wetqa.retrieval.engines import dense

    build_index(fixture_corpus, "dense", tmp_path / "d", {"model": str(tiny_e5)}, progress=False)
    r = open_index(tmp_path / "d", rescore=False)
    q = r.encoder.encode_queries([QUESTION])[0]
    full = np.asarray(r.embeddings, dtype=np.float32) @ q
    expected = sorted(range(len(full)), key=lambda i: (-full[i], i))[:5]
    monkeypatch.setattr(dense, "_SEARCH_BLOCK", 3)  # blocks smaller than k: merging is exercised
    assert [r.chunks.row_of(h.id) for h in r.search(QUESTION, k=5)] == expected
