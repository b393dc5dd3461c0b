import json
import random

import pytest

from wetqa.evaluation.attribution import (
    AttributionError,
    BM25Attributor,
    LLMAttributor,
    NLIAttributor,
    bm25_matrix,
    parse_llm_references,
    select,
)
from wetqa.evaluation.references import compute_scores, load_reference_items, prf, score_items, sweep

from .conftest import REFERENCES, require_shared
from .tiny_models import tiny_bert_dir

CANDS = [
    "Gemeenten huisvesten asielzoekers zoveel mogelijk in kleinschalige vorm.",
    "Nederland is een gemeenschap.",
    "Kansrijke asielzoekers krijgen na drie maanden toegang tot de arbeidsmarkt.",
]


@pytest.mark.unit
def test_bm25_picks_the_matching_sentence():
    a = BM25Attributor()
    scores = a.scores("Asielzoekers moeten na drie maanden kunnen werken op de arbeidsmarkt.", CANDS)
    assert scores.index(max(scores)) == 2 and max(scores) == 1.0
    assert select(scores, 0.5) == [2]
    assert a.scores("iets", []) == []
    assert a.scores("de het een", CANDS) == [0.0, 0.0, 0.0]  # only stop words


@pytest.mark.unit
def test_python_bm25_equals_bm25s():
    rng = random.Random(7)
    words = "asiel zoeker gemeente arbeid markt drie maanden werk huis de het".split()
    fast, ref = BM25Attributor(backend="python"), BM25Attributor(backend="bm25s")
    for _ in range(200):
        cands = [" ".join(rng.choice(words) for _ in range(rng.randint(0, 10))) for _ in range(rng.randint(1, 8))]
        q = " ".join(rng.choice(words) for _ in range(rng.randint(1, 6)))
        assert fast.scores(q, cands) == pytest.approx(ref.scores(q, cands), abs=1e-5)
        # The serving path: many answer sentences at once, candidate statistics cached.
        q2 = " ".join(rng.choice(words) for _ in range(rng.randint(1, 6)))
        rows = fast.normalised_matrix([q, q2], cands)
        assert rows[0] == pytest.approx(ref.scores(q, cands), abs=1e-5)
        assert rows[1] == pytest.approx(ref.scores(q2, cands), abs=1e-5)
    assert bm25_matrix([["a"]], []) == [[]]


@pytest.mark.unit
def test_prf_and_policies():
    assert prf(set(), {1}) == (0.0, 0.0, 0.0)  # empty prediction: precision 0, not NaN
    assert prf({1, 2}, {2, 3}) == (0.5, 0.5, 0.5)
    from wetqa.evaluation.references import RefItem

    items = [RefItem("A", 0, "s", ["x", "y"], {0}), RefItem("A", 1, "s", ["x", "y"], set())]
    scores = [[1.0, 0.2], [0.1, 0.1]]
    ex = score_items(items, scores, 0.5)
    assert (ex["n_scored"], ex["f1"], ex["no_gold_items"], ex["no_gold_correct_abstentions"]) == (1, 1.0, 1, 1.0)
    sc = score_items(items, scores, 0.5, no_gold="score")
    assert sc["n_scored"] == 2 and sc["f1"] == 1.0
    assert [p["threshold"] for p in sweep(items, scores, [0.0, 0.5])] == [0.0, 0.5]


@pytest.mark.unit
def test_malformed_items_are_recorded_not_fatal(tmp_path):
    good = {
        "party": "X",
        "statement": "s",
        "summarySentence": "Asielzoekers werken.",
        "paragraphs": [CANDS],
        "references": [CANDS[2]],
    }
    rows = [
        good,
        {"party": "X", "paragraphs": [CANDS]},
        {**good, "references": ["niet in de kandidaten"]},
        {**good, "summarySentence": "  "},
        {**good, "paragraphs": [[]], "references": []},
    ]
    (tmp_path / "X.json").write_text(json.dumps(rows))
    (tmp_path / "BAD.json").write_text("{not json")
    items, problems = load_reference_items(tmp_path)
    assert len(items) == 2 and len(problems) == 4
    assert any("not JSON" in p["problem"] for p in problems)
    assert items[1].candidates == []  # an empty candidate list is an item, scored as predicting nothing
    scores, failed = compute_scores(BM25Attributor(), items, progress=False)
    assert failed == [] and scores[1] == []


@pytest.mark.unit
def test_llm_reference_parsing_with_recorded_outputs():
    recorded = [
        ('{"references": ["Kansrijke asielzoekers krijgen na drie maanden toegang tot de arbeidsmarkt."]}', [2]),
        (
            'Hier is het antwoord:\n```json\n{"references": ["kansrijke asielzoekers krijgen na drie maanden toegang tot de arbeidsmarkt",'
            ' "Nederland is een gemeenschap."]}\n```',
            [1, 2],
        ),  # copy error (case, missing dot) matched fuzzily
        ('{"references": []}', []),
        ('{"references": ["Een zin die nergens staat en niet lijkt op de kandidaten."]}', []),
        ('{"references": ["1", "3"]}', [0, 2]),  # numbers instead of sentences
        ('geen JSON maar wel "Gemeenten huisvesten asielzoekers zoveel mogelijk in kleinschalige vorm."', [0]),
        ('{"references": ["a", "b", "c", "d"', []),
    ]
    for text, expected in recorded:
        assert parse_llm_references(text, CANDS) == expected, text
    a = LLMAttributor(lambda prompt: recorded[0][0])
    assert a.scores("Asielzoekers werken.", CANDS) == [0.0, 0.0, 1.0]


@pytest.mark.unit
def test_nli_and_cross_encoder_attributors_with_tiny_models(tmp_path):
    model = tiny_bert_dir(tmp_path / "nli", texts=CANDS, num_labels=3)
    nli = NLIAttributor(str(model))
    long_sentence = " ".join(["asielzoekers"] * 400)  # longer than the model's 128 positions: truncated, no crash
    scores = nli.scores(long_sentence, CANDS)
    assert len(scores) == 3 and all(0.0 <= s <= 1.0 for s in scores)
    from wetqa.evaluation.attribution import CrossEncoderAttributor

    ce_dir = tiny_bert_dir(tmp_path / "ce", texts=CANDS, num_labels=1)
    ce = CrossEncoderAttributor(str(ce_dir), max_length=128)
    s = ce.scores(long_sentence, CANDS)
    assert len(s) == 3 and all(0.0 <= x <= 1.0 for x in s)
    from wetqa.evaluation.methods import ATTRIBUTION, MethodError

    with pytest.raises(MethodError, match="unknown attribution method 'magic'; choose bm25, embedding"):
        ATTRIBUTION.make("magic")
    assert isinstance(ATTRIBUTION.make("nli", {"model": str(model)}), NLIAttributor)  # made from its settings
    with pytest.raises(MethodError, match="--model does not apply to the bm25 attribution method"):
        ATTRIBUTION.make("bm25", {"model": str(model)})
    with pytest.raises(AttributionError, match="the llm method needs a model"):
        ATTRIBUTION.make("llm")


@pytest.mark.integration
def test_bm25_on_the_real_reference_data(tmp_path):
    require_shared()
    import subprocess
    import sys

    from .conftest import ROOT

    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "wetqa",
            "eval",
            "references",
            "--data",
            str(REFERENCES),
            "--method",
            "bm25",
            "--out",
            str(tmp_path),
            "--output",
            "json",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["n_scored"] == 141 and out["no_gold_items"] == 1 and out["problems"] == []
    assert 0.6 <= out["f1"] <= 0.9  # published BM25 (15 parties): F1 .679
    assert set(out["per_party"]) == {"BBB", "CDA", "CU", "D66", "DENK", "FVD", "JA21", "NSC"}
    png = tmp_path / "pr_curve.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
