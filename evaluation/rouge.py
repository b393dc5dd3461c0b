"""ROUGE-L (F-measure of the longest common subsequence) over Dutch tokens.

Same definition as rouge-score's ``rougeL``; the LCS is computed with a
bit-parallel algorithm (Allison-Dix / Hyyrö) over Python integers, which is
exact and much faster than the dynamic-programming table for long answers.
"""

from __future__ import annotations

from dataclasses import dataclass

from .metrics import Metric, register
from .text import dutch_tokens


@dataclass(frozen=True, slots=True)
class RougeL:
    precision: float
    recall: float
    fmeasure: float


def lcs_length(a: list[str], b: list[str]) -> int:
    if not a or not b:
        return 0
    if len(a) < len(b):
        a, b = b, a  # bits over the shorter sequence
    masks: dict[str, int] = {}
    for i, tok in enumerate(b):
        masks[tok] = masks.get(tok, 0) | (1 << i)
    full = (1 << len(b)) - 1
    v = full
    for tok in a:
        m = masks.get(tok)
        if m is None:
            continue
        u = v & m
        v = ((v + u) | (v - u)) & full
    return len(b) - bin(v).count("1")


def rouge_l_tokens(prediction: list[str], reference: list[str]) -> RougeL:
    lcs = lcs_length(prediction, reference)
    if lcs == 0:
        return RougeL(0.0, 0.0, 0.0)
    p = lcs / len(prediction)
    r = lcs / len(reference)
    return RougeL(p, r, 2 * p * r / (p + r))


def rouge_l(prediction: str, reference: str, stem: bool = True) -> RougeL:
    return rouge_l_tokens(dutch_tokens(prediction, stem), dutch_tokens(reference, stem))


register(
    Metric(
        name="rouge",
        scores=("rougeL",),
        complete=("rougeL",),
        prefixes=("rougeL",),
        depends_on=lambda rec, item, corpus, settings: [item.answer],
        # A question without a gold answer (gold articles alone) has nothing to compare with: None, not a 0.
        compute=lambda rec, item, corpus: {
            "rougeL": rouge_l(rec.get("answer") or "", item.answer).fmeasure if item.answer.strip() else None
        },
        columns=(("ROU", "rougeL", 3),),
    )
)
