import http.server
import json
import pathlib
import random
import threading

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from wetqa.corpus.dataset import GoldArticle, QAItem, article_key
from wetqa.evaluation.answers import CorpusMap, evaluate_runs, markdown_table
from wetqa.evaluation.citations import citation_scores
from wetqa.evaluation.geval import CRITERIA, GEvalScorer, build_prompt, geval_scores
from wetqa.evaluation.judge import LLMJudge, parse_score, weighted_score
from wetqa.evaluation.llm import model_config
from wetqa.evaluation.meteor import meteor
from wetqa.evaluation.nli import NLIModel, nli_citation_scores
from wetqa.evaluation.rouge import lcs_length, rouge_l
from wetqa.evaluation.text import dutch_tokens
from wetqa.evaluation.wordnet import LEXNAMES, lexnames_text

from .tiny_models import tiny_bert_dir

pytestmark = pytest.mark.unit


# ---------------------------------------------------------------- ROUGE-L and METEOR
def test_dutch_tokens_keep_letters_and_article_numbers():
    assert dutch_tokens("Eén reëel artikel 7:271 BW", stem=False) == ["eén", "reëel", "artikel", "7:271", "bw"]
    from rouge_score import tokenizers

    assert tokenizers.DefaultTokenizer().tokenize("één reëel 7:271") == ["n", "re", "el", "7", "271"]  # why ours exists


def test_rouge_l_by_hand():
    # LCS of "a b c d" and "a c e d" is "a c d": P = 3/4, R = 3/4.
    r = rouge_l("a b c d", "a c e d", stem=False)
    assert (r.precision, r.recall, r.fmeasure) == (0.75, 0.75, 0.75)
    assert rouge_l("", "a b", stem=False).fmeasure == 0.0
    assert lcs_length(list("ABCBDAB"), list("BDCABA")) == 4


@settings(max_examples=300, deadline=None)
@given(
    a=st.lists(st.sampled_from("de het gezag ouder kind 12 wet x".split()), max_size=70),
    b=st.lists(st.sampled_from("de het gezag ouder kind 12 wet y".split()), max_size=70),
)
def test_rouge_l_equals_rouge_score_on_ascii(a, b):
    from rouge_score import rouge_scorer

    ref = rouge_scorer.RougeScorer(["rougeL"]).score(" ".join(b), " ".join(a))["rougeL"]
    ours = rouge_l(" ".join(a), " ".join(b), stem=False)
    assert ours.fmeasure == pytest.approx(ref.fmeasure, abs=1e-12)
    assert ours.precision == pytest.approx(ref.precision, abs=1e-12)


def test_meteor_equals_nltk_on_english():
    from nltk.translate.meteor_score import meteor_score

    from wetqa.evaluation.meteor import _resources

    wn = _resources()[1]
    rng = random.Random(3)
    words = "the cat sat on a mat dog was sitting rug quickly ran runs".split()
    for _ in range(30):
        hyp = [rng.choice(words) for _ in range(rng.randint(1, 12))]
        ref = [rng.choice(words) for _ in range(rng.randint(1, 12))]
        assert meteor(" ".join(hyp), " ".join(ref), language="en") == pytest.approx(
            meteor_score([ref], hyp, wordnet=wn)
        )


def test_meteor_dutch_uses_the_dutch_stemmer():
    # "kinderen" and "kinder" share the Dutch stem "kinder": a stem match, where exact matching finds none.
    assert meteor("kinderen", "kinder") == pytest.approx(0.5)
    assert meteor("kinderen", "kinder", language="en") == 0.0  # the English stemmer keeps them apart
    assert meteor("", "iets") == 0.0


def test_lexnames_is_the_documented_45_entry_list():
    assert len(LEXNAMES) == 45
    lines = lexnames_text().splitlines()
    assert lines[0] == "00\tadj.all\t3" and lines[3] == "03\tnoun.Tops\t1" and lines[44] == "44\tadj.ppl\t3"
    assert lines[29] == "29\tverb.body\t2"


# ---------------------------------------------------------------- citations
def test_citation_scores_by_hand():
    chunk_article = {
        "a1": ("X", "Artikel 1"),
        "a2": ("X", "Artikel 1"),
        "b1": ("X", "Artikel 2"),
        "c1": ("X", "Artikel 3"),
    }
    article_chunks = {
        article_key("X", "Artikel 1"): ["a1", "a2"],
        article_key("X", "Artikel 2"): ["b1"],
        article_key("X", "Artikel 3"): ["c1"],
    }
    gold = {article_key("X", "Artikel 1"), article_key("X", "Artikel 2")}
    s = citation_scores(["a1", "a2", "c1", "zz"], gold, chunk_article, article_chunks)
    # Chunk level: 2 of 4 cited are gold chunks; 2 of 3 gold chunks cited.
    assert (s["chunk"].precision, s["chunk"].recall, s["chunk"].hit) == (0.5, 2 / 3, 1.0)
    # Article level: cited articles {1, 3, ?zz}: 1 of 3 correct; 1 of 2 gold articles.
    assert (s["article"].precision, s["article"].recall, s["article"].hit) == (1 / 3, 0.5, 1.0)
    none = citation_scores([], gold, chunk_article, article_chunks)
    assert (none["chunk"].precision, none["chunk"].recall, none["chunk"].hit) == (0.0, 0.0, 0.0)
    assert citation_scores([" a1 "], gold, chunk_article, article_chunks)["chunk"].precision == 1.0  # ids trimmed


# ---------------------------------------------------------------- G-Eval
def test_weighted_score_by_hand():
    import math

    score, dist = weighted_score(
        {"4": math.log(0.6), "5": math.log(0.2), " 3": math.log(0.2), "x": math.log(0.5)}, (1, 2, 3, 4, 5)
    )
    assert score == pytest.approx(0.6 * 4 + 0.2 * 5 + 0.2 * 3)
    assert sum(dist.values()) == pytest.approx(1.0)
    assert weighted_score({"nee": -0.1}, (1, 2, 3)) == (None, {})
    assert parse_score("Score: 4/5", (1, 2, 3, 4, 5)) == 4 and parse_score("geen", (1, 2, 3)) is None


def test_geval_prompts():
    p = build_prompt(CRITERIA["consistency"], "Het antwoord.", "De vraag?", "De referentie.")
    assert "Evaluation steps" in p and "Reference answer:\nDe referentie." in p and p.endswith("Score:")
    f = build_prompt(CRITERIA["fluency"], "Het antwoord.", "De vraag?", "De referentie.")
    assert "De referentie" not in f and "from 1 to 3" in f


class FakeOpenAI(http.server.BaseHTTPRequestHandler):
    """A loopback server speaking the chat-completions wire format with recorded answers."""

    mode = "logprobs"
    calls = 0
    sampled = 0
    refuse = ""  # prompts holding this text get a 400 (a judge request that fails)
    lock = threading.Lock()

    def do_POST(self):  # noqa: N802
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        with self.lock:
            type(self).calls += 1
        if self.refuse and self.refuse in body["messages"][-1]["content"]:
            return self._send(400, {"error": {"message": "refused", "type": "invalid_request_error"}})
        usage = {"prompt_tokens": 100, "completion_tokens": 1, "total_tokens": 101}
        if self.mode == "logprobs" and body.get("logprobs"):
            import math

            top = [{"token": t, "logprob": math.log(p), "bytes": None} for t, p in (("4", 0.7), ("3", 0.3))]
            choice = {
                "index": 0,
                "finish_reason": "stop",
                "message": {"role": "assistant", "content": "4"},
                "logprobs": {"content": [{"token": "4", "logprob": math.log(0.7), "bytes": None, "top_logprobs": top}]},
            }
            choices = [choice]
        else:  # no log-probabilities: one request a sample, the answers in turn
            with self.lock:
                answer = ["2", "3", "geen idee", "3"][type(self).sampled % 4]
                type(self).sampled += 0 if body.get("logprobs") else 1
            message = {"role": "assistant", "content": answer}
            choices = [{"index": 0, "finish_reason": "stop", "message": message, "logprobs": None}]
        body = {"id": "x", "object": "chat.completion", "created": 0, "model": body["model"], "choices": choices}
        self._send(200, {**body, "usage": usage})

    def _send(self, status: int, payload: dict) -> None:
        out = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(out)))
        self.end_headers()
        self.wfile.write(out)

    def log_message(self, *a):
        pass


@pytest.fixture
def fake_openai():
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), FakeOpenAI)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    FakeOpenAI.calls = FakeOpenAI.sampled = 0
    FakeOpenAI.mode, FakeOpenAI.refuse = "logprobs", ""
    yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    server.shutdown()


def test_judge_through_the_openai_backend_logprobs_samples_cache_and_errors(fake_openai, tmp_path):
    judge = LLMJudge(model_config("judge-model", fake_openai), cache_dir=tmp_path / "cache", samples=4)
    res = judge.score(["beoordeel dit"], (1, 2, 3, 4, 5))[0]
    assert res.method == "logprobs" and res.score == pytest.approx(0.7 * 4 + 0.3 * 3)
    calls = FakeOpenAI.calls
    again = LLMJudge(model_config("judge-model", fake_openai), cache_dir=tmp_path / "cache", samples=4).score(
        ["beoordeel dit"], (1, 2, 3, 4, 5)
    )[0]
    assert again.method == "cache:logprobs" and FakeOpenAI.calls == calls  # answered from the disk cache
    FakeOpenAI.mode = "samples"  # a server without log-probabilities
    res = LLMJudge(model_config("judge-model", fake_openai), samples=4).score(["iets anders"], (1, 2, 3, 4, 5))[0]
    assert res.method == "samples" and res.score == pytest.approx((2 + 3 + 3) / 3)
    dead = LLMJudge(model_config("m", "http://127.0.0.1:9/v1", max_retries=0, timeout=2))
    res = dead.score(["x"], (1, 2, 3))[0]
    assert res.score is None and "cannot reach the model server at http://127.0.0.1:9/v1" in res.error


def test_a_judge_that_cannot_be_reached_is_asked_once(fake_openai):
    """A dead judge server: one request, whatever the number of answers and criteria; every answer gets
    its error, and `unavailable()` tells eval generation to exit 3. A judge that answered once is asked
    again after a failure (those answers are failures, exit 1)."""
    dead = LLMJudge(model_config("m", "http://127.0.0.1:9/v1", max_retries=0, timeout=2))
    sent = []
    generate = dead.backend.generate
    dead.backend.generate = lambda requests: sent.append(len(requests)) or generate(requests)
    scorer = GEvalScorer(dead)
    rows = scorer([({"answer": f"Antwoord {i}."}, QAItem(str(i), "Vraag?", "Referentie.")) for i in range(5)], None)
    assert sent == [1]
    assert all("cannot reach the model server at http://127.0.0.1:9/v1" in r["geval_error"] for r in rows)
    assert "G-Eval judge" in scorer.unavailable() and "127.0.0.1:9" in scorer.unavailable()
    live = GEvalScorer(LLMJudge(model_config("judge-model", fake_openai)))
    live([({"answer": "Het antwoord."}, QAItem("1", "Vraag?", "Referentie."))], None)
    assert live.unavailable() is None and live.judge.answered == 4


def test_geval_scores_normalised_per_criterion(fake_openai):
    judge = LLMJudge(model_config("judge-model", fake_openai))
    out = geval_scores(judge, [({"answer": "Het antwoord."}, QAItem("1", "Vraag?", "Referentie."))])[0]
    assert out["geval_coherence"] == pytest.approx((3.7 - 1) / 4)
    assert out["geval_fluency"] == pytest.approx(1.0)  # only "3" is on the 1-3 scale: renormalised to p=1, (3-1)/2


def _first_answer_token_logprobs(model_dir, prompt: str, top: int, steps: int = 2) -> dict[str, float]:
    """The model's ``top`` likeliest first non-blank greedy tokens, computed here by forward passes (tokens
    that read the same are one entry, their probabilities summed)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(model_dir)
    lm = AutoModelForCausalLM.from_pretrained(model_dir).eval()
    messages = [{"role": "user", "content": prompt}]
    ids = list(tok.apply_chat_template(messages, add_generation_prompt=True, return_dict=True)["input_ids"])
    first = None
    for _ in range(steps):
        with torch.no_grad():
            logprobs = torch.log_softmax(lm(torch.tensor([ids])).logits[0, -1].float(), dim=-1)
        first = logprobs if first is None else first
        best = int(logprobs.argmax())
        if tok.decode([best]).strip():
            first = logprobs
            break
        ids.append(best)
    out: dict[str, float] = {}
    for i in sorted(range(first.shape[0]), key=lambda i: -float(first[i]))[:top]:
        t, lp = tok.decode([i]), float(first[i])
        out[t] = float(np.logaddexp(out[t], lp)) if t in out else lp
    return out


def test_judge_through_the_transformers_backend_reads_the_models_own_distribution(tmp_path):
    from wetqa.evaluation.judge import TOP_LOGPROBS
    from wetqa.generation import Request, Sampling, make_backend

    from .tiny_models import tiny_llama_dir

    model = tiny_llama_dir(tmp_path / "llama")
    prompt = "Reply with the score only, a single number from 1 to 5.\nScore:"
    config = model_config(f"transformers:{model}")
    assert config.kind == "transformers"  # BACKEND:MODEL runs on that registered backend
    request = Request(
        "", [], [{"role": "user", "content": prompt}], Sampling(temperature=0.0, max_tokens=2, logprobs=8)
    )
    got = make_backend(config).generate([request])[0].top_logprobs
    expected = _first_answer_token_logprobs(model, prompt, 8)
    assert got.keys() == expected.keys() and all(got[t] == pytest.approx(expected[t], abs=1e-4) for t in got)
    res = LLMJudge(config, samples=3).score([prompt], (1, 2, 3, 4, 5))[0]
    want, _ = weighted_score(_first_answer_token_logprobs(model, prompt, TOP_LOGPROBS), (1, 2, 3, 4, 5))
    if want is None:  # no score token among the likeliest: the judge samples instead
        assert res.method == "samples"
    else:
        assert res.method == "logprobs" and res.score == pytest.approx(want, abs=1e-4)


# ---------------------------------------------------------------- NLI citations
class ToyNLI:
    """Entails when every word of the hypothesis occurs in the premise: a fixed, checkable judge.

    ``window``: how many words a premise and hypothesis may have together (the model's window)."""

    def __init__(self, window: int = 10_000):
        self.window = window

    def fits(self, premise, hypothesis):
        return len(premise.split()) + len(hypothesis.split()) <= self.window

    def entailment(self, pairs):
        return [
            1.0 if set(h.lower().strip(".").split()) <= set(p.lower().replace(".", " ").split()) else 0.0
            for p, h in pairs
        ]


def test_alce_leave_one_out_precision_by_hand():
    texts = {"c1": "de ouder misbruikt het gezag", "c2": "de rechter beslist", "c3": "fietsen op het pad"}
    rec = {"answer": "De ouder misbruikt het gezag. De rechter beslist.", "cited_ids": ["c1", "c2", "c3"]}
    out = nli_citation_scores(ToyNLI(), [(rec, QAItem("1", "?"))], texts)[0]
    # Both sentences entailed by all three joined (recall 1). Sentence 1: c2 and c3 are over-cited
    # (alone they do not entail it, the rest does); sentence 2: c1 and c3 are. Precision (3-2 + 3-2) / 6.
    assert out["nli_citation_recall"] == 1.0
    assert out["nli_citation_precision"] == pytest.approx(2 / 6)
    assert out["nli_citation_rule"] == "answer-level"  # no inline marker: DOC IDS for every sentence
    none = nli_citation_scores(ToyNLI(), [({"answer": "Iets.", "cited_ids": []}, QAItem("1", "?"))], texts)[0]
    assert none["nli_citation_recall"] == 0.0 and none["nli_citation_precision"] == 0.0


TEXTS = {
    "c1": "de ouder misbruikt het gezag",
    "c2": "de rechter beslist",
    "c3": "fietsen op het pad",
    "c4": "de ouder de rechter",
}
RETRIEVED = [{"id": c, "doc_id": f"DOC{n:04d}"} for n, c in enumerate(TEXTS, 1)]


def _alce(answer, nli=None):
    rec = {"answer": answer, "cited_ids": [], "retrieved": RETRIEVED}
    return nli_citation_scores(nli or ToyNLI(), [(rec, QAItem("1", "?"))], TEXTS)[0]


def test_alce_inline_citations_worked_by_hand():
    # S1 cites [1][2]: entailed jointly; [1] alone entails (precise), [2] alone does not while [1] without
    # it still does (irrelevant). S2 cites [3], which does not entail it. S3 cites nothing: 0, uncounted.
    out = _alce("De ouder misbruikt het gezag [1][2]. De rechter beslist [3]. Geen bron hier.")
    assert out["nli_citation_rule"] == "inline" and out["nli_sentences"] == 3
    assert out["nli_citation_recall"] == pytest.approx(1 / 3)
    assert out["nli_citation_precision"] == pytest.approx(1 / 3)  # 1 precise of 3 counted citations
    # wetqa's own ids work the same; a citation out of range makes the sentence 0 and is not counted.
    out = _alce("De rechter beslist [DOC0002]. De ouder misbruikt het gezag [9].")
    assert out["nli_citation_recall"] == pytest.approx(1 / 2) and out["nli_citation_precision"] == 1.0
    # At most three citations per sentence: [4] (which alone would entail) is not read.
    out = _alce("De ouder de rechter [3][3][3][4].")
    assert out["nli_citation_recall"] == 0.0 and out["nli_citation_precision"] == 0.0


def test_alce_premises_longer_than_the_window_are_judged_per_passage():
    # Joined, [1][3] exceed a 9-word window: each passage is judged alone, [1] entails, never cut.
    out = _alce("De ouder misbruikt het gezag [1][3].", ToyNLI(window=9))
    assert out["nli_citation_recall"] == 1.0 and out["nli_window_splits"] >= 1
    assert out["nli_citation_precision"] == pytest.approx(1 / 2)  # [3] alone no, [1] without it yes


def _controlled_cross_encoder(tmp_path, num_labels, bias, id2label=None):
    """A tiny BERT cross-encoder whose logits are exactly ``bias`` for every input."""
    import torch
    from transformers import AutoModelForSequenceClassification

    path = tiny_bert_dir(tmp_path / f"ce{num_labels}", num_labels=num_labels)
    model = AutoModelForSequenceClassification.from_pretrained(path)
    with torch.no_grad():
        model.classifier.weight.zero_()
        model.classifier.bias.copy_(torch.tensor(bias, dtype=torch.float32))
    if id2label:
        model.config.id2label = id2label
        model.config.label2id = {v: k for k, v in id2label.items()}
    model.save_pretrained(path)
    return path


def test_cross_encoder_probabilities_are_monotonic_and_read_by_label(tmp_path):
    from wetqa.evaluation.attribution import CrossEncoderAttributor

    scores = []
    for i, logit in enumerate([-2.0, 0.5, 0.95, 1.05, 3.0]):
        path = _controlled_cross_encoder(tmp_path / str(i), 1, [logit])
        scores.append(CrossEncoderAttributor(str(path)).scores("zin", ["bron"])[0])
    # The old transform gave 0.95 for logit .95 but .74 for 1.05: larger logit, lower score.
    assert scores == sorted(scores) and scores[0] == pytest.approx(1 / (1 + np.exp(2.0)))
    # Three labels with entailment in the middle: its softmax probability, not the last column's.
    path = _controlled_cross_encoder(
        tmp_path / "nli", 3, [0.0, 2.0, 1.0], {0: "contradiction", 1: "entailment", 2: "neutral"}
    )
    got = CrossEncoderAttributor(str(path)).scores("zin", ["bron"])[0]
    assert got == pytest.approx(np.exp(2) / (1 + np.exp(2) + np.exp(1)), rel=1e-4)


def test_nli_model_with_a_tiny_bert_built_here(tmp_path):
    model = tiny_bert_dir(tmp_path / "nli", num_labels=3)
    nli = NLIModel(str(model), batch_size=2, max_length=64)
    pairs = [
        ("de ouder misbruikt het gezag " * 40, "de ouder"),
        ("a", "b"),
        ("c", "d"),
    ]  # the first is truncated, not an error
    probs = nli.probabilities(pairs)
    assert len(probs) == 3 and all(sum(p.values()) == pytest.approx(1.0, abs=1e-5) for p in probs)
    rec = {"answer": "De ouder misbruikt het gezag. Ook dit.", "cited_ids": ["c1"]}
    out = nli_citation_scores(nli, [(rec, QAItem("1", "?"))], {"c1": "tekst"})[0]
    assert 0.0 <= out["nli_citation_recall"] <= 1.0 and out["nli_sentences"] == 2


# ---------------------------------------------------------------- runs
def _corpus():
    from wetqa.corpus.records import Chunk

    return CorpusMap(
        [
            Chunk(id=i, doc_id=i, law_id="X", version_date="d", law="L", article=a, part=1, text="t")
            for i, a in (("a1", "Artikel 1"), ("b1", "Artikel 2"))
        ]
    )


def test_evaluate_runs_records_bad_lines_and_resumes(tmp_path, monkeypatch):
    run = tmp_path / "run"
    run.mkdir()
    lines = [
        json.dumps({"id": "1", "answer": "de ouder misbruikt het gezag", "cited_ids": ["a1"]}),
        "{broken json",
        json.dumps({"id": "2", "answer": "iets", "cited_ids": ["b1", "nope"]}),
        json.dumps({"id": "99", "answer": "x", "cited_ids": []}),
        json.dumps({"answer": "no id"}),
    ]
    (run / "run-1.jsonl").write_text("\n".join(lines) + "\n")
    items = [
        QAItem("1", "?", "de ouder misbruikt het gezag", [GoldArticle("X", "Artikel 1")]),
        QAItem("2", "?", "iets anders", [GoldArticle("X", "Artikel 1")]),
    ]
    res = evaluate_runs([run], items, _corpus(), tmp_path / "eval", progress=False)
    assert len(res["problems"]) == 3
    s = res["summary"]
    assert s["rougeL"]["mean"] == pytest.approx(
        100 * (1.0 + 2 / 3) / 2, abs=0.01
    )  # "iets" vs "iets anders": P 1, R 1/2
    assert s["chunk_precision"]["mean"] == pytest.approx(100 * (1.0 + 0.0) / 2)
    rows = [json.loads(l) for l in (tmp_path / "eval" / "scores.jsonl").read_text().splitlines()]
    assert [r for r in rows if r["id"] == "2"][0]["unknown_cited_ids"] == ["nope"]
    for f in ("metrics.json", "metrics.csv", "table.md"):
        assert (tmp_path / "eval" / f).is_file()
    import wetqa.evaluation.rouge as g  # where the ROUGE metric computes

    # A killed evaluation leaves a torn last line: it is cut off and only that question is scored again.
    scores_path = tmp_path / "eval" / "scores.jsonl"
    whole = scores_path.read_text().splitlines()
    scores_path.write_text("\n".join(whole[:-1]) + "\n" + whole[-1][:15])
    resumed = evaluate_runs([run], items, _corpus(), tmp_path / "eval", progress=False)
    assert resumed["summary"]["rougeL"] == s["rougeL"]
    assert [json.loads(l) for l in scores_path.read_text().splitlines()] == rows  # every line whole again
    monkeypatch.setattr(g, "rouge_l", lambda *a, **k: (_ for _ in ()).throw(AssertionError("recomputed")))
    again = evaluate_runs([run], items, _corpus(), tmp_path / "eval", progress=False)
    assert again["summary"]["rougeL"] == s["rougeL"]


@pytest.mark.unit
def test_journal_reader_cuts_a_torn_tail_so_appends_start_a_new_line(tmp_path):
    from wetqa.evaluation.judge import DiskCache
    from wetqa.io import read_journal

    assert read_journal(tmp_path / "absent.jsonl") == []
    path = tmp_path / "judge-cache.jsonl"
    path.write_text('{"key": "a", "value": {"score": 1}}\n\n{"key": "b", "val')
    cache = DiskCache(tmp_path)
    assert cache.get("a") == {"score": 1} and cache.get("b") is None
    cache.put("b", {"score": 2})
    assert [r["key"] for r in read_journal(path)] == ["a", "b"]
    assert DiskCache(tmp_path).get("b") == {"score": 2}


@pytest.mark.unit
def test_the_judge_cache_is_a_folder_wetqa_owns_made_when_first_written(tmp_path):
    """A second judging into the same cache folder was refused: the folder was owned (main's
    own_folder(out / "cache")) but the cache file written into it was not on its list."""
    from wetqa.evaluation.judge import DiskCache
    from wetqa.io import OutputError, owned_names

    cache = DiskCache(tmp_path / "cache")
    assert not (tmp_path / "cache").exists()  # a judge set up writes nothing
    cache.put("a", {"score": 1})
    DiskCache(tmp_path / "cache").put("b", {"score": 2})  # the next run writes beside it again
    assert owned_names(tmp_path / "cache") == {"judge-cache.jsonl"}
    assert DiskCache(tmp_path / "cache").get("b") == {"score": 2}
    (tmp_path / "user").mkdir()
    (tmp_path / "user" / "notes.txt").write_text("mine")
    with pytest.raises(OutputError, match="notes.txt"):
        DiskCache(tmp_path / "user").put("a", {"score": 1})
    assert sorted(p.name for p in (tmp_path / "user").iterdir()) == ["notes.txt"]


def test_markdown_table_shape():
    t = markdown_table(
        {"bm25+extractive": {"rougeL": {"mean": 52.1, "std": 0.0}, "article_hit": {"mean": 62.7, "std": 1.5}}}
    )
    head, sep, row = t.strip().splitlines()
    assert head == "| configuration | COH | FLU | ROU | MET | CON | REL | R | P | Hit |"
    assert row == "| bm25+extractive | - | - | 52.1 ± 0.0 | - | - | - | - | - | 62.7 ± 1.5 |"


def _one_run(tmp_path, answer="de ouder misbruikt het gezag", cited=("a1",)):
    run = tmp_path / "run"
    run.mkdir(exist_ok=True)
    (run / "run-1.jsonl").write_text(json.dumps({"id": "1", "answer": answer, "cited_ids": list(cited)}) + "\n")
    return run


def test_cached_scores_are_not_reused_when_their_inputs_change(tmp_path):
    from wetqa.evaluation.answers import RunFileError

    items = [QAItem("1", "?", "de ouder misbruikt het gezag", [GoldArticle("X", "Artikel 1")])]
    run = _one_run(tmp_path)
    first = evaluate_runs([run], items, _corpus(), tmp_path / "eval", progress=False)
    assert first["summary"]["rougeL"]["mean"] == pytest.approx(100)
    # The run file changed (a regenerated answer): refused, naming the metrics and an answer.
    _one_run(tmp_path, answer="iets heel anders")
    with pytest.raises(RunFileError, match=r"other inputs \(citations of 1 answer\(s\), e.g. run/run-1:1; .*rouge"):
        evaluate_runs([run], items, _corpus(), tmp_path / "eval", progress=False)
    again = evaluate_runs([run], items, _corpus(), tmp_path / "eval", progress=False, force=True)
    assert again["summary"]["rougeL"]["mean"] < 100
    # The gold data changed: ROUGE-L is scored again, the citations (same gold articles) are kept.
    items2 = [QAItem("1", "?", "iets heel anders", [GoldArticle("X", "Artikel 1")])]
    with pytest.raises(RunFileError, match=r"rouge of 1 answer"):
        evaluate_runs([run], items2, _corpus(), tmp_path / "eval", progress=False)
    # The judge changed: G-Eval is not reused from another model.
    res = evaluate_runs([run], items2, _corpus(), tmp_path / "eval", ["rouge"], progress=False, force=True)
    assert res["summary"]["rougeL"]["mean"] == pytest.approx(100)


def test_each_geval_criterion_is_retried_on_its_own(tmp_path, fake_openai):
    from wetqa.evaluation.answers import RunFileError
    from wetqa.evaluation.geval import GEvalSettings
    from wetqa.evaluation.scoring import Scoring

    items = [QAItem("1", "?", "de ouder misbruikt het gezag", [GoldArticle("X", "Artikel 1")])]
    run = _one_run(tmp_path)

    def geval(judge):  # G-Eval built from its settings, as `eval generation --judge` builds it
        return Scoring(["geval"], {"geval": GEvalSettings(judge=judge, judge_base_url=fake_openai)}, tmp_path / "c")

    FakeOpenAI.refuse = "Fluency (1-3)"  # the judge fails on fluency
    first = evaluate_runs([run], items, _corpus(), tmp_path / "eval", geval("judge-a"), progress=False)
    assert FakeOpenAI.calls == 4 and "geval_fluency" not in first["summary"] and first["failed"]["count"] == 1
    FakeOpenAI.refuse = ""
    res = evaluate_runs([run], items, _corpus(), tmp_path / "eval", geval("judge-a"), progress=False)
    assert FakeOpenAI.calls == 5  # fluency was missing, so it went to the judge again (the rest from its cache)
    assert res["summary"]["geval_fluency"]["mean"] == pytest.approx(100) and res["failed"]["count"] == 0
    rows = [json.loads(line) for line in (tmp_path / "eval" / "scores.jsonl").read_text().splitlines()]
    assert (
        "geval_error" not in rows[-1]
        and rows[0]["geval_error"].startswith("judge: ")
        and "refused" in rows[0]["geval_error"]
    )
    with pytest.raises(RunFileError, match="geval of 1 answer"):  # another judge: not reused
        evaluate_runs([run], items, _corpus(), tmp_path / "eval", geval("judge-b"), progress=False)


@pytest.mark.unit
@pytest.mark.parametrize("id_key", ["law_id", "bwb_id"])  # bwb_id: run records of before law_id
def test_abstentions_score_zero_over_all_and_are_left_out_over_answered_with_a_risk_coverage_curve(tmp_path, id_key):
    run = tmp_path / "run"
    run.mkdir()
    first = {id_key: "X", "article": "Artikel 1"}
    lines = [
        # answered, right article, sure
        {"id": "1", "answer": "de ouder misbruikt het gezag", "cited_ids": ["a1"], "confidence": 0.9},
        # answered, wrong article, less sure
        {"id": "2", "answer": "iets", "cited_ids": ["b1"], "confidence": 0.6},
        # abstained: nothing cited; its first retrieved article would have been right
        {"id": "3", "answer": "geen artikel", "cited_ids": [], "confidence": 0.1, "abstained": True},
    ]
    (run / "run-1.jsonl").write_text(
        "\n".join(json.dumps({**r, "retrieved": [first]}) for r in lines) + "\n", encoding="utf-8"
    )
    items = [QAItem(q, "?", "de ouder misbruikt het gezag", [GoldArticle("X", "Artikel 1")]) for q in ("1", "2", "3")]
    res = evaluate_runs([run], items, _corpus(), tmp_path / "eval", ("rouge", "citations"), progress=False)
    assert res["abstention"]["rate"] == pytest.approx(1 / 3, abs=1e-4)
    assert res["abstention"]["abstained"] == 1
    # Over all: the abstention scores 0; over answered: the two answers only.
    assert res["summary"]["article_hit"]["mean"] == pytest.approx(100 * 1 / 3, abs=0.01)
    assert res["summary_answered"]["article_hit"]["mean"] == pytest.approx(50.0)
    # Risk at coverage: most confident first (1 right, then 2 wrong, then 3 whose first article was right).
    curve = {p["coverage"]: p["risk"] for p in res["abstention"]["risk_coverage"]}
    assert curve[1.0] == pytest.approx(1 / 3, abs=1e-3)
    png = pathlib.Path(res["abstention"]["risk_coverage_png"])
    assert png.is_file() and png.read_bytes()[:4] == b"\x89PNG"
