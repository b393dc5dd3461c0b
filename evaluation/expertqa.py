"""Claim-evidence support prediction on ExpertQA (English, expert-labelled claims with cited evidence).

Each ExpertQA claim carries the web evidence its answer cited and an expert's
support label. The task measured here: does the evidence completely support
the claim ("Complete") or not ("Partial", "Incomplete", "Missing")? Claims
without evidence, or labelled N/A, have nothing to predict and are counted
apart. A method gives each claim a support score; the score is judged
threshold-free (AUROC) and at thresholds (P/R/F1 of "Complete", F1 of the
unsupported claims, their mean macro-F1, accuracy; with the sweep's best).

Methods: ``overlap`` (the share of the claim's content words found in the
evidence; no model), ``embedding`` (best cosine of the claim and an evidence
sentence), ``cross-encoder`` (best relevance) and ``nli`` (best entailment
probability with an evidence snippet as premise and the claim as hypothesis).
Scores are appended to ``scores.jsonl`` claim by claim, so an interrupted run
resumes where it stopped.
"""

from __future__ import annotations

import json
import random
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Protocol

from wetqa.console import check_model_ref, progress_bar
from wetqa.corpus.dataset import data_files
from wetqa.generation.sentences import split_sentences
from wetqa.io import read_journal

from .attribution import NLISettings
from .methods import ATTRIBUTION, SUPPORT, Method, NoSettings

POSITIVE = "Complete"
NEGATIVE = ("Partial", "Incomplete", "Missing")
# English function words: dropped so that overlap counts content words only.
_STOP = frozenset(
    """a an the and or but if of to in on at by for with from as is are was were be been being it its this
that these those there their they them he she his her we our you your i not no nor so than too very can will would should
could may might must do does did has have had which who whom whose what when where why how all any both each more most
other some such only own same into over under about against between through during before after above below up down out
off again further then once also just""".split()
)
_WORD = re.compile(r"\w+", re.UNICODE)
_EVIDENCE_HEADER = re.compile(r"^\s*\[\d+\]\s*\S*\s*\n+")  # "[3] https://...\n\n" before the snippet


@dataclass(slots=True)
class ClaimItem:
    key: str  # file:line:system:claim, stable across runs
    question: str
    claim: str
    evidence: list[str]  # snippet texts, the "[n] url" header removed
    support: str | None
    worthiness: str | None
    field: str

    @property
    def label(self) -> bool | None:
        """True for complete support, False for partial/incomplete/missing, None when there is nothing to judge."""
        if not self.evidence or self.support not in (POSITIVE, *NEGATIVE):
            return None
        return self.support == POSITIVE


def evidence_text(snippet: str) -> str:
    return _EVIDENCE_HEADER.sub("", snippet, count=1).strip()


def load_claims(path: str | Path) -> tuple[list[ClaimItem], list[dict]]:
    """All claims of ExpertQA ``*.jsonl`` files (a folder or one file) and the problems met.

    A malformed line or claim is recorded and skipped; the rest still loads.
    """
    files = data_files(path, "*.jsonl", "ExpertQA data")
    items: list[ClaimItem] = []
    problems: list[dict] = []
    for f in files:
        with f.open(encoding="utf-8-sig") as fh:  # a leading BOM skipped
            for n, line in enumerate(fh, 1):
                if not line.strip():
                    continue
                try:
                    row = json.loads(line)
                    answers = row["answers"]
                    field = (row.get("metadata") or {}).get("field") or ""
                    question = row["question"]
                    if not isinstance(answers, dict):
                        raise TypeError("answers is not an object")
                except (json.JSONDecodeError, KeyError, TypeError) as exc:
                    problems.append(
                        {"file": f.name, "line": n, "problem": f"malformed question: {type(exc).__name__}: {exc}"}
                    )
                    continue
                for system, answer in answers.items():
                    for c, claim in enumerate((answer or {}).get("claims") or []):
                        try:
                            text = claim["claim_string"]
                            if not isinstance(text, str) or not text.strip():
                                raise ValueError("empty claim_string")
                            evidence = [evidence_text(e) for e in claim.get("evidence") or [] if isinstance(e, str)]
                            items.append(
                                ClaimItem(
                                    f"{f.name}:{n}:{system}:{c}",
                                    question,
                                    text.strip(),
                                    [e for e in evidence if e],
                                    claim.get("support"),
                                    claim.get("worthiness"),
                                    field,
                                )
                            )
                        except (KeyError, TypeError, ValueError) as exc:
                            problems.append(
                                {
                                    "file": f.name,
                                    "line": n,
                                    "system": system,
                                    "claim": c,
                                    "problem": f"malformed claim: {type(exc).__name__}: {exc}",
                                }
                            )
    return items, problems


# ------------------------------------------------------------------ methods
class SupportScorer(Protocol):
    name: str
    default_threshold: float

    def score(self, claim: str, evidence: Sequence[str]) -> float: ...


@lru_cache(maxsize=1)
def _english_stemmer():
    import Stemmer

    return Stemmer.Stemmer("english")


def content_words(text: str) -> set[str]:
    """Stemmed words that are not function words; numbers of two or more digits count, single digits do not."""
    words = [w for w in _WORD.findall(text.lower()) if (len(w) > 1 if w.isdigit() else w not in _STOP)]
    return set(_english_stemmer().stemWords(words))


class OverlapScorer:
    """The share of the claim's content words (stemmed) that occur anywhere in its evidence."""

    name = "overlap"
    default_threshold = 0.8

    def score(self, claim: str, evidence: Sequence[str]) -> float:
        words = content_words(claim)
        if not words:
            return 0.0
        seen: set[str] = set()
        for e in evidence:
            seen |= content_words(e)
        return len(words & seen) / len(words)


class SentenceScorer:
    """The best score of the claim against any evidence sentence, from a reference-attribution method."""

    def __init__(self, attributor, name: str, default_threshold: float):
        self.attributor, self.name, self.default_threshold = attributor, name, default_threshold

    def score(self, claim: str, evidence: Sequence[str]) -> float:
        sentences = [s for e in evidence for s in split_sentences(e)]
        scores = self.attributor.scores(claim, sentences) if sentences else []
        return max(scores, default=0.0)


class NLIScorer:
    """The best entailment probability of the claim (hypothesis) given one evidence snippet (premise)."""

    name = "nli"
    default_threshold = 0.5

    def __init__(self, model: str | None = None, batch_size: int = 16):
        from .nli import DEFAULT_NLI_MODEL, NLIModel

        self.nli = NLIModel(model or DEFAULT_NLI_MODEL, batch_size=batch_size)

    def score(self, claim: str, evidence: Sequence[str]) -> float:
        return max(self.nli.entailment([(e, claim) for e in evidence]), default=0.0) if evidence else 0.0


def _sentence_method(name: str) -> Method:
    """A reference-attribution method as a support method: its best score over the evidence's sentences."""
    attribution = ATTRIBUTION.get(name)

    def make(settings) -> SentenceScorer:
        a = attribution.make(settings)
        return SentenceScorer(a, name, a.default_threshold)

    return Method(name, attribution.settings, make, f"the best {attribution.description} of an evidence sentence")


SUPPORT.register(Method("overlap", NoSettings, lambda s: OverlapScorer(), "content-word overlap, no model"))
for _name in ("embedding", "cross-encoder"):
    SUPPORT.register(_sentence_method(_name))
SUPPORT.register(
    Method(
        "nli",
        NLISettings,
        lambda s: NLIScorer(check_model_ref(s.model, "NLI model")),
        "the best entailment by an evidence snippet",
    )
)


# ------------------------------------------------------------------ metrics (pure functions)
def auroc(scores: Sequence[float], labels: Sequence[bool]) -> float | None:
    """Area under the ROC curve: the chance a positive outscores a negative (ties count half)."""
    pairs = sorted(zip(scores, labels))
    n_pos = sum(labels)
    n_neg = len(labels) - n_pos
    if n_pos == 0 or n_neg == 0:
        return None
    rank_sum = 0.0
    i = 0
    while i < len(pairs):  # average ranks over ties
        j = i
        while j < len(pairs) and pairs[j][0] == pairs[i][0]:
            j += 1
        mid = (i + 1 + j) / 2
        rank_sum += mid * sum(1 for k in range(i, j) if pairs[k][1])
        i = j
    return (rank_sum - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg)


def _f1(p: float, r: float) -> float:
    return 2 * p * r / (p + r) if p + r else 0.0


def at_threshold(scores: Sequence[float], labels: Sequence[bool], threshold: float) -> dict:
    """Predict "Complete" at score >= threshold. P/R/F1 of "Complete"; F1 of "not complete" (the claims
    a checker exists to flag) and their mean, macro-F1, since "Complete" is the majority."""
    tp = sum(1 for s, y in zip(scores, labels) if s >= threshold and y)
    fp = sum(1 for s, y in zip(scores, labels) if s >= threshold and not y)
    fn = sum(1 for s, y in zip(scores, labels) if s < threshold and y)
    tn = len(labels) - tp - fp - fn
    p = tp / (tp + fp) if tp + fp else 0.0
    r = tp / (tp + fn) if tp + fn else 0.0
    neg_p = tn / (tn + fn) if tn + fn else 0.0
    neg_r = tn / (tn + fp) if tn + fp else 0.0
    f1, neg_f1 = _f1(p, r), _f1(neg_p, neg_r)
    return {
        "threshold": threshold,
        "precision": round(p, 4),
        "recall": round(r, 4),
        "f1": round(f1, 4),
        "unsupported_f1": round(neg_f1, 4),
        "macro_f1": round((f1 + neg_f1) / 2, 4),
        "accuracy": round((tp + tn) / len(labels), 4) if labels else 0.0,
    }


def support_metrics(scores: Sequence[float], labels: Sequence[bool], threshold: float) -> dict:
    thresholds = sorted(set(round(s, 4) for s in scores))
    sweep = [at_threshold(scores, labels, t) for t in thresholds]
    positive_rate = sum(labels) / len(labels) if labels else 0.0
    a = auroc(scores, labels)
    return {
        "n": len(labels),
        "positive_rate": round(positive_rate, 4),
        "auroc": None if a is None else round(a, 4),
        "at_default": at_threshold(scores, labels, threshold),
        "best_macro_f1": max(sweep, key=lambda x: (x["macro_f1"], -x["threshold"])) if sweep else None,
        # What a method must beat: always answering "Complete" (macro-F1 = half its F1), or the majority label.
        "always_complete": at_threshold([1.0] * len(labels), labels, 0.5),
        "majority_accuracy": round(max(positive_rate, 1 - positive_rate), 4),
    }


# ------------------------------------------------------------------ running
def choose(
    items: Sequence[ClaimItem], field: str | None = None, limit: int | None = None, seed: int = 0
) -> list[ClaimItem]:
    """The judgeable claims (optionally of one field), a seeded random sample of ``limit`` of them."""
    chosen = [i for i in items if i.label is not None and (field is None or i.field.lower() == field.lower())]
    if limit is not None and limit < len(chosen):
        chosen = random.Random(seed).sample(chosen, limit)
        chosen.sort(key=lambda i: i.key)
    return chosen


def scores_file(out: Path, method: str, model: str | None) -> Path:
    """One scores file per method and model, so a run never resumes from another model's scores."""
    slug = re.sub(r"[^A-Za-z0-9._-]+", "_", model or "default")
    return out / f"scores_{method}_{slug}.jsonl"


def read_scores(path: Path) -> dict[str, float]:
    """Scores already made; a line cut short by an interruption is cut off, and that claim scored again."""
    return {rec["key"]: float(rec["score"]) for rec in read_journal(path)}


def score_claims(
    scorer: SupportScorer, items: Iterable[ClaimItem], scores_path: Path, progress: bool = True
) -> tuple[dict[str, float], list[dict]]:
    """Scores per claim key, resuming from ``scores_path`` and appending each new score as it is made."""
    items = list(items)
    done = read_scores(scores_path)
    problems: list[dict] = []
    todo = [i for i in items if i.key not in done]
    scores_path.parent.mkdir(parents=True, exist_ok=True)
    with scores_path.open("a", encoding="utf-8") as out:
        for item in progress_bar(todo, desc=f"support ({scorer.name})", unit="claim", progress=progress):
            try:
                s = float(scorer.score(item.claim, item.evidence))
            except Exception as exc:  # noqa: BLE001 - one failing claim must not lose the others
                problems.append({"key": item.key, "problem": f"{type(exc).__name__}: {exc}"})
                continue
            done[item.key] = s
            out.write(json.dumps({"key": item.key, "score": s}) + "\n")
            out.flush()
    return done, problems
