"""A model's ONNX export records the vector it gave a fixed question when it was made; a model whose files were
changed since (zeroed word embeddings, zeroed int8 weights, an edited prompt) is refused in one line at load,
never used without a word (issue 55, item 2)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from wetqa.console import UnavailableError

from .tiny_models import tiny_gemma_embedding

pytestmark = pytest.mark.unit


@pytest.fixture
def exported(fixture_corpus, tmp_path):
    from wetqa.corpus import load_chunks
    from wetqa.retrieval.tooling.export import export_onnx

    path = tiny_gemma_embedding(tmp_path / "gemma", [c.text for c in load_chunks(fixture_corpus)])
    export_onnx(path)
    return path


def _load(path, **kw):
    from wetqa.retrieval.models.onnx_encoder import OnnxEncoder

    return OnnxEncoder(path, **kw)


def test_an_export_records_its_probe_and_loads_when_untouched(exported):
    probe = json.loads((exported / "onnx" / "probe.json").read_text(encoding="utf-8"))
    assert probe["text"] and len(probe["fp32"]) == len(probe["int8"]) == 48
    _load(exported)
    _load(exported, int8_questions=True)


def test_zeroed_word_embeddings_are_refused(exported):
    table = exported / "onnx" / "word_embeddings.npy"
    words = np.load(table)
    np.save(table, np.zeros_like(words))
    with pytest.raises(UnavailableError, match="other vectors than at its export"):
        _load(exported, int8_questions=True)


def test_zeroed_int8_weights_are_refused_though_the_file_keeps_its_size(exported):
    import onnx
    from onnx import numpy_helper

    path = exported / "onnx" / "encoder.int8.onnx"
    model = onnx.load(str(path))
    for t in model.graph.initializer:
        if t.data_type == onnx.TensorProto.INT8:
            t.CopyFrom(numpy_helper.from_array(np.zeros_like(numpy_helper.to_array(t)), t.name))
    onnx.save_model(model, str(path))
    with pytest.raises(UnavailableError, match="other vectors than at its export"):
        _load(exported, int8_questions=True)


def test_an_edited_prompt_is_refused(exported):
    meta_path = exported / "onnx" / "onnx.json"
    meta = json.loads(meta_path.read_text(encoding="utf-8"))
    meta["prompts"]["query"] = "task: something else | query: "
    meta_path.write_text(json.dumps(meta), encoding="utf-8")
    with pytest.raises(UnavailableError, match="other vectors than at its export"):
        _load(exported)


def test_another_models_graph_in_the_folder_is_refused_as_a_damaged_model(exported, tmp_path, fixture_corpus):
    """Another model's ONNX file in the reader's folder was an internal error (exit 70; issue 55, item 8): it is a
    model that cannot be used, refused in one line (exit 3) naming its folder."""
    from wetqa.corpus import load_chunks
    from wetqa.retrieval.tooling.export import export_onnx

    from .tiny_models import tiny_unigram_sentence_transformer

    other = tiny_unigram_sentence_transformer(tmp_path / "other", [c.text for c in load_chunks(fixture_corpus)])
    export_onnx(other)  # a BERT-like model: other inputs, another width
    for name in ("encoder.onnx", "encoder.int8.onnx"):
        if (other / "onnx" / name).is_file():
            (exported / "onnx" / name).write_bytes((other / "onnx" / name).read_bytes())
    with pytest.raises(UnavailableError, match=str(exported)):
        _load(exported, int8_questions=True)


def test_a_damaged_tokenizer_is_refused_as_a_damaged_model(exported):
    """A damaged tokenizer file was a usage error (exit 2; issue 55, item 8): the model cannot be used (exit 3)."""
    meta = json.loads((exported / "onnx" / "onnx.json").read_text(encoding="utf-8"))
    kind = meta.get("tokenizer", "unigram")
    target = {"sentencepiece": exported / "tokenizer.model", "tokenizers": exported / "tokenizer.json"}.get(kind)
    if target is None:  # the export's own unigram tables
        target = next(p for p in (exported / "onnx").iterdir() if "vocab" in p.name or "token" in p.name)
    target.write_bytes(b"\x00garbage" * 10)
    with pytest.raises(UnavailableError, match=str(exported)):
        _load(exported)
