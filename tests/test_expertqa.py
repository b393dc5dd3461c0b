"""Claim-evidence support prediction on ExpertQA: loader, metrics, methods and the resumable command."""

import json
import random
import subprocess
import sys

import pytest

from wetqa.evaluation.expertqa import (
    OverlapScorer,
    at_threshold,
    auroc,
    choose,
    evidence_text,
    load_claims,
    read_scores,
    support_metrics,
)

from .conftest import FIXTURES, ROOT
from .tiny_models import tiny_bert_dir

SMALL = FIXTURES / "expertqa" / "small.jsonl"
SHARED_EXPERTQA = ROOT.parent / "shared" / "data" / "expertqa"


@pytest.mark.unit
def test_loader_reads_claims_strips_evidence_headers_and_records_malformed_input():
    items, problems = load_claims(SMALL)
    assert len(items) == 6
    assert {p["problem"].split(":")[0] for p in problems} == {"malformed question", "malformed claim"}
    first = items[0]
    assert first.field == "Law" and first.evidence[0].startswith("The court may end parental authority")
    assert [i.label for i in items] == [True, False, None, False, None, True]  # no evidence / N/A: nothing to judge
    assert evidence_text("[12] https://x.y/z\n\nText.") == "Text."
    assert [i.key for i in choose(items, field="law")] == [items[0].key, items[1].key, items[3].key]
    with pytest.raises(FileNotFoundError):
        load_claims(FIXTURES / "no-such-folder")


def _pairwise_auroc(scores, labels):
    pos = [s for s, y in zip(scores, labels) if y]
    neg = [s for s, y in zip(scores, labels) if not y]
    return sum(1.0 if p > n else 0.5 if p == n else 0.0 for p in pos for n in neg) / (len(pos) * len(neg))


@pytest.mark.unit
def test_auroc_equals_the_pairwise_definition_with_ties():
    rng = random.Random(3)
    for _ in range(200):
        n = rng.randint(2, 40)
        scores = [rng.choice([0.0, 0.25, 0.5, 0.75, 1.0, rng.random()]) for _ in range(n)]
        labels = [rng.random() < 0.6 for _ in range(n)]
        if 0 < sum(labels) < n:
            assert auroc(scores, labels) == pytest.approx(_pairwise_auroc(scores, labels))
        else:
            assert auroc(scores, labels) is None


@pytest.mark.unit
def test_threshold_metrics_and_baselines():
    scores, labels = [0.9, 0.8, 0.4, 0.1], [True, False, True, False]
    m = at_threshold(scores, labels, 0.5)
    assert (m["precision"], m["recall"], m["accuracy"], m["unsupported_f1"], m["macro_f1"]) == (0.5, 0.5, 0.5, 0.5, 0.5)
    full = support_metrics(scores, labels, 0.5)
    assert full["auroc"] == 0.75 and full["majority_accuracy"] == 0.5
    always = full["always_complete"]
    assert (always["recall"], always["precision"], always["unsupported_f1"]) == (1.0, 0.5, 0.0)
    assert always["macro_f1"] == round(always["f1"] / 2, 4)
    assert full["best_macro_f1"]["macro_f1"] >= m["macro_f1"]


@pytest.mark.unit
def test_overlap_scores_content_words_only():
    s = OverlapScorer()
    assert (
        s.score("Regular exercise lowers blood pressure.", ["Exercising regularly lowered the blood pressure"]) == 1.0
    )
    assert s.score("Judges are appointed for life.", ["Unrelated snippet about cooking."]) == 0.0
    assert s.score("the and of", ["anything"]) == 0.0  # no content words: no support


@pytest.mark.unit
def test_nli_and_embedding_methods_run_with_tiny_models(tmp_path):
    from wetqa.evaluation.methods import SUPPORT

    texts = ["The court may end parental authority.", "Regular exercise lowers blood pressure."]
    nli = SUPPORT.make("nli", {"model": str(tiny_bert_dir(tmp_path / "nli", texts=texts, num_labels=3))})
    p = nli.score("Courts may end authority.", texts)
    assert 0.0 <= p <= 1.0
    assert nli.score("x", []) == 0.0
    from .tiny_models import tiny_sentence_transformer

    emb = SUPPORT.make("embedding", {"model": str(tiny_sentence_transformer(tmp_path / "st", texts))})
    assert -1.0 <= emb.score("Courts may end authority.", [" ".join(texts) * 40]) <= 1.0  # beyond the model's length


def _run(*args):
    return subprocess.run(
        [sys.executable, "-m", "wetqa", "eval", "claims", *args, "--no-progress"],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )


@pytest.mark.unit
def test_command_writes_metrics_and_resumes_from_its_scores(tmp_path):
    out = tmp_path / "eq"
    r = _run("--data", str(SMALL), "--out", str(out), "--output", "json")
    assert r.returncode == 0, r.stderr
    result = json.loads(r.stdout)
    assert result["n"] == 4 and result["n_problems"] == 2 and result["claims_loaded"] == 6
    scores_path = out / "scores_overlap_default.jsonl"
    assert len(read_scores(scores_path)) == 4
    # An interrupted run leaves a cut-off last line: it is ignored and that claim scored again.
    lines = scores_path.read_text().splitlines()
    scores_path.write_text("\n".join(lines[:2]) + "\n" + lines[2][:10])
    again = json.loads(_run("--data", str(SMALL), "--out", str(out), "--output", "json").stdout)
    assert again["auroc"] == result["auroc"] and len(read_scores(scores_path)) == 4
    bad = _run("--data", str(tmp_path / "nothing"), "--out", str(out))
    assert bad.returncode == 2 and "no ExpertQA data" in bad.stderr


@pytest.mark.integration
def test_real_expertqa_labels_load_as_published():
    if not SHARED_EXPERTQA.is_dir():
        pytest.skip("../shared/data/expertqa is not here")
    items, problems = load_claims(SHARED_EXPERTQA)
    supports = {}
    for i in items:
        supports[i.support] = supports.get(i.support, 0) + 1
    # The data's README: 5,137 claims; Complete 2,926 / Incomplete 810 / Partial 259 / Missing 902 / N/A 231.
    assert len(items) == 5137 and not problems
    assert {k: supports[k] for k in ("Complete", "Incomplete", "Partial", "Missing", "N/A")} == {
        "Complete": 2926,
        "Incomplete": 810,
        "Partial": 259,
        "Missing": 902,
        "N/A": 231,
    }
    judged = choose(items)
    scorer = OverlapScorer()
    m = support_metrics([scorer.score(i.claim, i.evidence) for i in judged], [bool(i.label) for i in judged], 0.8)
    assert m["n"] == 3995
    assert m["auroc"] > 0.5  # word overlap carries some signal, if little
