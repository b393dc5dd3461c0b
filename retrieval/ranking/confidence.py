"""How sure retrieval is that its first article answers the question: signals and a calibrated estimate.

The corpus holds 272 of the roughly 22,000 regulations in force; a question about any other law still
gets a first article. These signals tell the two apart:

- ``oov``: the share of the question's content words that occur nowhere in the corpus (a question
  about "tbs" or "omzetbelasting" in a corpus without the Penal Code or the VAT act);
- ``coverage``: the share of the question's content words, weighted by idf (words absent from the
  corpus weigh most), that the first article contains (its text and headings);
- ``bm25``: the first article's whole-article BM25 score over the most it could be (the sum of the
  question's idf);
- ``dense``: the dense model's cosine of question and article (raw, not normalised over the hits),
  and ``dense_margin``, how far it stands above the next article's;
- ``agree``: whether BM25 alone ranked the article first too; ``margin``: its lead in the fused score;
- ``law_named``: the question names a law by title, abbreviation or a name it spells out ("de Wet open
  overheid", "de Omgevingswet"): +1 when the first article is of that law, -1 when the named law is not
  in the corpus and no law it names is;
- ``clause``: the share of the question's words in the clause announcing the article's list
  (``structure.py``);
- ``title``: how much of the first article's law's title the question's words cover ("kinderbijslag"
  of the Algemene Kinderbijslagwet; :class:`..dutch.TitleCover`): a question about a held law's
  subject is answerable even in plain words.

A logistic model over these (few features, strong regularisation) gives the probability that the first
article is right. ``bench/calibrate.py`` fits it on the dev questions (first article right or wrong) and
on questions about laws outside the corpus (all wrong), cross-validated, and writes it with the
cross-validated abstention threshold to ``confidence.json`` beside this file.
"""

from __future__ import annotations

import json
import math
import re
import weakref
from collections.abc import Sequence
from functools import cache
from importlib import resources

import numpy as np

from .._base import Hit
from ..dutch import frame_terms
from ..rules import words as rule_words
from ..scope import holds_whole_bwb

FEATURES = (
    "oov",
    "coverage",
    "bm25",
    "heading",
    "dense",
    "dense_margin",
    "law_dense",
    "agree",
    "margin",
    "same_law",
    "law_named",
    "clause",
    "xde",
    "law_share",
    "title",
    "read",
    "read_margin",
    "read_sts",
    "qbm",
    "qde",
    "qread",
)
_WORD = re.compile(r"\w+", re.UNICODE)
# Function words of English that Dutch does not share: a question mostly made of them is English.
_ENGLISH = frozenset(rule_words("english_words.tsv"))


def looks_english(question: str) -> bool:
    words = _WORD.findall(question.lower())
    return len(words) >= 3 and sum(w in _ENGLISH for w in words) / len(words) >= 0.3


class SignalContext:
    """What the signals read beside the hits: the articles index (its views, vocabulary and law table) and
    the law names the ranking knows (or None: made once from the index's law table)."""

    def __init__(self, index, law_names=None):
        from ..articles.bm25 import ArticleRetriever

        # The signals read an articles index's views and vocabulary; any other retriever gives none.
        self.index = index if isinstance(index, ArticleRetriever) else None
        self._law_names = law_names

    @property
    def law_names(self):
        if self._law_names is None and self.index is not None:
            from ..dutch import LawNames

            laws = self.index.laws
            self._law_names = LawNames(
                laws.records if laws is not None else [{"title": t, "law_id": t} for t in law_titles(self.index)]
            )
        return self._law_names


def _idf(df: int, n: int) -> float:
    return math.log(1 + (n - df + 0.5) / (df + 0.5))


def _contains(view, term: int, doc: int) -> bool:
    start, end = int(view.indptr[term]), int(view.indptr[term + 1])
    docs = view.indices[start:end]
    at = int(np.searchsorted(docs, doc))
    return at < len(docs) and int(docs[at]) == doc


def law_titles(index) -> frozenset[str]:
    """The lower-cased law titles of an index's corpus (read once per index)."""
    titles = _LAW_TITLES.get(index)
    if titles is None:
        titles = _LAW_TITLES[index] = frozenset(t.lower() for t in index.chunks.law_titles())
    return titles


# Each index's law titles, read once (kept while the index lives).
_LAW_TITLES: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def signals(context: SignalContext, question: str, hits: Sequence[Hit]) -> dict[str, float]:
    """The signals of the first hit (see the module docstring); those a pipeline cannot give are left out."""
    out: dict[str, float] = {}
    if not hits:
        return out
    top = hits[0]
    f = top.features
    # Margins to the second hit only: a pipeline retrieves k hits (3 by default), and the signals
    # must mean the same whatever k is.
    if "dense" in f:
        out["dense"] = float(f["dense"])
        second = hits[1].features.get("dense") if len(hits) > 1 else None
        out["dense_margin"] = float(f["dense"] - second) if second is not None else 0.0
    if "first_rank" in f:
        out["agree"] = 1.0 if f["first_rank"] == 1 else 0.0
    if "clause" in f:
        out["clause"] = float(f["clause"])
    out["margin"] = float(top.score - hits[1].score) if len(hits) > 1 else 1.0
    out["same_law"] = sum(h.chunk.law == top.chunk.law for h in hits[1:3]) / 2 if len(hits) > 1 else 1.0
    out["english"] = 1.0 if looks_english(question) else 0.0  # for the message, not the model
    if "place" in f:
        # Is the question about this law at all: the dense cosine of the question and the article's place
        # (law title, Boek / Titel / Afdeling, article heading), as the ranking measured it. A question
        # about another law's subject finds words in this article, but not its law.
        out["law_dense"] = float(f["place"])
    if "read" in f:  # the reader's cosine of the question and the first article, and its lead on the next
        out["read"] = float(f["read"])
        second = hits[1].features.get("read") if len(hits) > 1 else None
        out["read_margin"] = float(f["read"] - second) if second is not None else 0.0
    if "read_sts" in f:  # the same cosine with the question's sentence-similarity view
        out["read_sts"] = float(f["read_sts"])
    # The first article's nearest written question (the questions view): by words (over the best of all written
    # questions), and by meaning, in the dense model's and the reader's space (raw cosines).
    for name in ("qbm", "qde", "qread"):
        if name in f and math.isfinite(f[name]):
            out[name] = float(f[name])
    index = context.index
    if index is None:
        return out
    out["articles"] = 1.0  # which models apply (the signals read an articles index: SignalContext)
    tokens = index.analyzer.tokens(question)
    frames = frame_terms()
    content = list(dict.fromkeys(t for t in tokens if t not in frames and len(t) > 1))
    # Words that frame a question ("voorwaarden", "wanneer") are words of its content too when counting
    # whether it says enough to point at an article: "Wat zijn de voorwaarden van adoptie?" has two.
    ids = index.chunks.term_ids(tokens)
    view = index.views["article"] if "article" in index.views else next(iter(index.views.values()))
    n = view.num_docs
    idf_max = _idf(0, n)
    weights = {
        t: (_idf(int(view.indptr[ids[t] + 1] - view.indptr[ids[t]]), n) if t in ids else idf_max) for t in content
    }
    out["content_words"] = float(len({t for t in tokens if len(t) > 1}))  # for the rule and the message
    if content:
        out["oov"] = sum(t not in ids for t in content) / len(content)
        doc = f.get("doc")
        if doc is not None:
            have = sum(w for t, w in weights.items() if t in ids and _contains(view, ids[t], int(doc)))
            out["coverage"] = have / sum(weights.values())
    else:
        out["oov"], out["coverage"] = 1.0, 0.0
    in_vocab = [t for t in tokens if t in ids]
    bound = sum(_idf(int(view.indptr[ids[t] + 1] - view.indptr[ids[t]]), n) for t in in_vocab)
    if bound > 0 and "bm25_article" in f:
        out["bm25"] = float(f["bm25_article"]) / bound
    if "bm25_heading" in f and "heading" in index.views:
        hv = index.views["heading"]
        hbound = sum(_idf(int(hv.indptr[ids[t] + 1] - hv.indptr[ids[t]]), hv.num_docs) for t in in_vocab)
        out["heading"] = float(f["bm25_heading"]) / hbound if hbound > 0 else 0.0
    names = context.law_names
    held = names.named(question)
    if held & {h.chunk.law_id for h in hits}:
        # The question names a law this corpus holds, found in the scope asked (a law named but out of the
        # request's dates or laws is no reason to answer from others). For the rule, not the model.
        out["named_held"] = 1.0
    out["law_named"] = 1.0 if top.chunk.law_id in held else -1.0 if names.names_absent(question) and not held else 0.0
    if "xde" in f:
        out["xde"] = float(f["xde"])
    if "f_law_share" in f:
        out["law_share"] = float(f["f_law_share"])
    if "f_title" in f:
        out["title"] = float(f["f_title"])
    laws = index.laws
    out["whole"] = 1.0 if laws is not None and holds_whole_bwb(laws.held) else 0.0
    return out


class ConfidenceModel:
    """Logistic regression over standardised signals; a signal the pipeline lacks counts as its mean."""

    def __init__(self, spec: dict):
        self.features: list[str] = list(spec["features"])
        self.mean = np.asarray(spec["mean"], dtype=np.float64)
        self.std = np.asarray(spec["std"], dtype=np.float64)
        self.coef = np.asarray(spec["coef"], dtype=np.float64)
        self.intercept = float(spec["intercept"])
        self.threshold = float(spec.get("threshold", 0.0))
        self.spec = spec

    def probability(self, values: dict[str, float]) -> float:
        x = np.asarray([values.get(name, m) for name, m in zip(self.features, self.mean)], dtype=np.float64)
        z = float(((x - self.mean) / self.std) @ self.coef + self.intercept)
        return 1.0 / (1.0 + math.exp(-z))


@cache
def shipped_models() -> dict[str, ConfidenceModel]:
    """The models ``bench/calibrate.py`` fitted, by pipeline kind (``articles+dense``, ``articles``)."""
    path = resources.files("wetqa.retrieval.ranking").joinpath("confidence.json")
    if not path.is_file():
        return {}
    return {kind: ConfidenceModel(spec) for kind, spec in json.loads(path.read_text(encoding="utf-8")).items()}


def model_for_key(key: str) -> ConfidenceModel | None:
    """The shipped model fitted for a pipeline key (``articles+dense+reader@whole``: the same key as its
    ranking model's). A pipeline no model was fitted for (another first stage: bm25s over chunks, Pyserini,
    dense alone) has none: it always answers, with confidence 1."""
    if not key:
        return None
    return shipped_models().get(key)


# A question of fewer content words than this ("gezag?") does not say which article it means: however well
# its one word matches, its confidence is at most SHORT_QUESTION_CAP (under every calibrated threshold).
MIN_CONTENT_WORDS = 2
SHORT_QUESTION_CAP = 0.01


def estimate(
    context: SignalContext, question: str, hits: Sequence[Hit], key: str
) -> tuple[float, dict[str, float], ConfidenceModel | None]:
    """(confidence in [0, 1], the signals, the model of pipeline ``key`` or None); 0 without hits."""
    model = model_for_key(key)
    if not hits:
        return 0.0, {}, model
    values = signals(context, question, hits)
    if model is None:
        return 1.0, values, None  # no model fitted for this kind of pipeline: nothing to say
    return capped(values, model.probability(values)), values, model


def capped(values: dict[str, float], confidence: float) -> float:
    """The model's confidence, at most SHORT_QUESTION_CAP for a question too short to say which article it
    means, or in English, which Dutch law texts cannot be matched on (what its words match is chance,
    however sure it looks). A law named that the corpus lacks is a signal of the model (``law_named``), not
    a cap: people name laws loosely ("de Wet", "de Privacywet"), and a wrong flag would refuse outright."""
    if values.get("content_words", MIN_CONTENT_WORDS) < MIN_CONTENT_WORDS or values.get("english"):
        return min(confidence, SHORT_QUESTION_CAP)
    return confidence
