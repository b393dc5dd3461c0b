"""The article ranking that understands the question: candidates from words and from meaning, scored by
a calibrated linear model over what each candidate's evidence says.

Candidates (the union, all in the question's scope):

- the articles BM25 ranks first for the question (:mod:`.articles`), and for the legal words its
  everyday words stand for (:func:`..dutch.expand`);
- the articles whose passages are nearest the question in a dense model's space, and nearest the
  question with those legal words (:mod:`.passages`: the passage vectors kept with the index, of every
  passage or of the regulations of some kinds; other candidates' dense features through the vector cache);
- the best articles, by BM25 and by meaning, of the few laws whose titles the question's words cover
  most ("omzetbelasting", "paspoort": :class:`..dutch.TitleCover`), searched on their own;
- the same of the laws the question names by title, name or abbreviation ("volgens de Awb":
  :class:`..dutch.LawNames`).

Each candidate's features, most min-max normalised over the candidates of the question:

``bm``, ``xbm`` BM25 (fused views) of the question and of its legal words; ``de``, ``xde`` the dense
cosine of its best chunk with the question and the expanded question; ``place`` the cosine of the
question with the article's law, Boek / Titel / Afdeling and heading; ``clause`` the share of the
question's words in the clause that announces the article's list (:func:`..dutch.lead_overlap`); ``named`` the
question names the article's law (:mod:`..dutch`); ``title`` the share of the law's title the
question's words cover; ``law_de``, ``law_bm`` the best ``de`` and ``bm`` of
any candidate of the same law, ``law_share`` that law's share of the ten nearest candidates (a question
is about a law before it is about an article); ``cited`` how many regulations refer to the article's law
(log, over the most referred-to: the codes and framework laws come before the regulations under them);
``kind_*`` the kind of regulation (a formal law before its decree, unless the decree answers better);
``bes`` the article is a BES regulation (+1 when the question is about Caribisch Nederland, -1 otherwise).

The weights (``ranking.json`` beside this module) are fitted by ``bench/cross_validate.py`` on the
benchmark's dev questions and the everyday questions of ``bench/data`` together, cross-validated, on the
272 laws and on the whole BWB; a model is chosen by what the pipeline measures (with or without dense)
and by the index's scale: an index of the whole BWB has its own (``@whole``).
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import cache
from importlib import resources

import numpy as np

from wetqa.corpus.records import FORMAL_KINDS

from .._base import Hit, minmax
from ..dutch import expand, expanded_question, lead_overlap, question_terms
from ..ranking.keys import with_context  # noqa: F401  (re-exported: the fitting reads keys here)
from ..rules import pairs as rule_pairs
from ..scope import names_bes

DEPTH = 30  # candidates from each source
TITLED_LAWS = 5  # the laws whose titles the question covers most, searched on their own
TITLE_COVER = 0.5  # ... when it covers at least this share of the title
SHARE_OF = 10  # the nearest candidates a law's share is counted over
KIND_GROUPS: dict[str, tuple[str, ...]] = {"wet": FORMAL_KINDS}
for _group, _kind in rule_pairs("kind_groups.tsv"):
    KIND_GROUPS[_group] = (*KIND_GROUPS.get(_group, ()), _kind)
KIND_FEATURES = tuple(f"kind_{g}" for g in KIND_GROUPS if g != "wet")
_GROUP_OF = {kind: group for group, kinds in KIND_GROUPS.items() for kind in kinds}
DENSE_FEATURES = ("de", "xde", "place", "law_de", "law_share")
# A candidate's regulation rests on a law that has a candidate too (a decree beside its law), or a candidate
# regulation rests on the candidate's law: the relations the corpus's references give (``parent``).
RELATION_FEATURES = ("implements", "implemented")
FEATURES = (
    "bm", "xbm", "clause", "named", "title", "law_bm", "cited", *KIND_FEATURES, "bes", *RELATION_FEATURES,
    *DENSE_FEATURES,
)  # fmt: skip
# With a reader: the reader's cosine of the question and the candidate's law read whole (its names, headings
# and opening articles: readers.law_documents), min-max over the candidates' laws.
LAW_READ_FEATURES = ("law_read",)
# The hand-written signals (rules about Dutch legal language, not learned) and the features each makes: what
# an ablation leaves out to measure whether it still adds beside the reader (wetqa fit ranking --without).
HAND_SIGNALS = {
    "lexicon": ("xbm", "xde"),  # everyday words -> legal words (rules/everyday.tsv)
    "frames": (),  # the question frame words, left out of the announcing clause's overlap
    "clause": ("clause",),  # the announcing clause (dutch.lead_overlap)
    "names": ("named",),  # laws named by title, reference name or abbreviation (dutch.LawNames)
    "titles": ("title",),  # laws whose titles the question's words cover (dutch.TitleCover)
    "kinds": KIND_FEATURES,  # the kinds of regulation grouped by hand
    "bes": ("bes",),  # a BES regulation for a question that names the islands, its twin's penalty otherwise
    "relations": RELATION_FEATURES,  # a decree beside the law it rests on
}
READ_LAWS = 8  # the laws the reader finds nearest the question, searched on their own (5: the right law among the
# whole BWB's candidates for 228 of 241 everyday questions, 8: 229, 12: 229; docs/results.md)
# The questions view (articles.questions_view): each candidate's best and second best written question by BM25
# (over the best of all written questions) and, with the dense model, by cosine; how many of its questions
# are near the best of all; the best cosine of any question of its law (its articles' and the regulation's).
QUESTION_FEATURES = ("qbm", "qbm2")
QUESTION_DENSE_FEATURES = ("qde", "qde2", "qde_near", "law_q")
QUESTION_LAWS = 5  # the laws whose written questions are nearest the question, searched on their own
NEAR = 0.03  # a written question within this cosine of the best of all is near
# A conversation's context (retrieval.conversation): each candidate's BM25 and dense cosine for the earlier
# questions, whether its law is one the earlier turns cite or name, whether it is an article cited before, and
# how near it stands to one (the next article of the same law). Weighed by models of their own (``+context``),
# fitted on conversations: a single question is ranked by the models without them.
CONTEXT_FEATURES = ("ctx_bm", "ctx_law", "ctx_cited", "ctx_near")
CONTEXT_DENSE_FEATURES = ("ctx_de",)


def _law_best(values: np.ndarray, law: np.ndarray) -> np.ndarray:
    """Each candidate's law's best value among the candidates."""
    keys, inverse = np.unique(law, return_inverse=True)
    best = np.full(len(keys), -np.inf)
    np.maximum.at(best, inverse, values)
    return best[inverse]


@dataclass(slots=True)
class Candidates:
    """One question's candidate articles and their features (one value per candidate each)."""

    question: str
    articles: np.ndarray  # ranked article ids
    values: dict[str, np.ndarray] = field(default_factory=dict)
    raw: dict[str, np.ndarray] = field(default_factory=dict)  # unnormalised signals (confidence reads them)
    scores: np.ndarray | None = None  # the learned ranking's score of each candidate (None: not scored yet)
    context: dict = field(default_factory=dict)  # what collecting found that the features read (terms, laws)

    def order(self) -> np.ndarray:
        """The candidates' positions best first (ties by article id, as every ranking here breaks them)."""
        scores = self.scores if self.scores is not None else np.zeros(len(self.articles))
        return np.lexsort((self.articles, -scores))

    def matrix(self, features: Sequence[str]) -> np.ndarray:
        n = len(self.articles)
        return np.stack([self.values.get(f, np.zeros(n)) for f in features], 1) if n else np.zeros((0, len(features)))


class RankingModel:
    """A linear score over candidate features (a feature the pipeline lacks counts 0)."""

    def __init__(self, spec: dict, key: str = ""):
        self.features: list[str] = list(spec["features"])
        self.weights = np.asarray(spec["weights"], dtype=np.float64)
        self.spec = spec
        self.key = key  # the pipeline it was fitted for (its key in ranking.json)

    def score(self, candidates: Candidates) -> np.ndarray:
        return candidates.matrix(self.features) @ self.weights


@cache
def shipped_models() -> dict[str, RankingModel]:
    path = resources.files("wetqa.retrieval.ranking").joinpath("ranking.json")
    if not path.is_file():
        return {}
    return {kind: RankingModel(spec, kind) for kind, spec in json.loads(path.read_text(encoding="utf-8")).items()}


def model_key(
    dense: bool, whole: bool = False, reader: bool = False, questions: bool = False, context: bool = False
) -> str:
    """The key of the model for a pipeline: ``articles`` [``+dense``] [``+questions``] [``+context``] [``+reader``]
    [``@whole``]."""
    return (
        "articles" + ("+dense" if dense else "") + ("+questions" if questions else "") + ("+context" if context else "")
        + ("+reader" if reader else "") + ("@whole" if whole else "")
    )  # fmt: skip


def model_for_key(key: str) -> RankingModel | None:
    """The shipped model fitted for a pipeline key; an index of the whole BWB that no model was fitted for
    takes the general one of its kind (a part of the BWB is ranked by the general one)."""
    models = shipped_models()
    return models.get(key) or models.get(key.partition("@")[0])


def model_for(dense: bool, whole: bool = False) -> RankingModel | None:
    """The shipped model for a pipeline (with the dense signals or without), the whole BWB's own when the
    index holds it (its candidates differ in kind, and without passage vectors it has no dense first
    stage); a part of the BWB, or a whole one no model was fitted for, takes the general one."""
    return model_for_key(model_key(dense, whole))


class CandidateFeatures:
    """Computes the candidates of a question and their features over one articles index."""

    def __init__(
        self, articles, passages=None, encoder=None, cache=None, depth: int = DEPTH, laws_read=None,
        without: frozenset[str] = frozenset(), questions=None,
    ):  # fmt: skip
        from ..dutch import LawNames, TitleCover

        self.articles, self.passages, self.encoder, self.cache = articles, passages, encoder, cache
        self.depth = depth
        self.laws_read = laws_read  # the reader's vectors of the index's laws (readers.LawReader), or None
        self.questions = questions  # the index's questions view (articles.questions_view.QuestionsView), or None
        # Hand-written signals left out (an ablation: ``wetqa fit ranking --without lexicon,names``): HAND_SIGNALS.
        unknown = set(without) - set(HAND_SIGNALS)
        if unknown:
            raise ValueError(
                f"unknown hand-written signal(s) {', '.join(sorted(unknown))}; known: {', '.join(HAND_SIGNALS)}"
            )
        self.without = frozenset(without)
        laws = articles.laws
        self.law_names = LawNames(laws.records if laws is not None else [])
        self.titles = TitleCover([r.get("title") or "" for r in (laws.records if laws is not None else [])])
        self.ranked_law = np.asarray(articles.ranked_law)
        self._law_static: dict[str, np.ndarray] | None = None

    @property
    def dense(self) -> bool:
        return self.encoder is not None

    def law_static(self) -> dict[str, np.ndarray]:
        """Per law version: its kind group and how referred-to it is (read once)."""
        if self._law_static is None:
            records = self.articles.laws.records if self.articles.laws is not None else []
            cited = np.asarray([math.log1p(r.get("cited_by") or 0) for r in records], dtype=np.float64)
            top = float(cited.max()) if len(cited) else 0.0
            static = {"cited": cited / top if top > 0 else cited}
            groups = [_GROUP_OF.get(r.get("kind") or "", "wet") for r in records]
            for g in KIND_GROUPS:
                if g != "wet":
                    static[f"kind_{g}"] = np.asarray([x == g for x in groups], dtype=np.float64)
            static["bes"] = np.asarray([r.get("jurisdiction") == "bes" for r in records], dtype=np.float64)
            static["law_id"] = np.asarray([r["law_id"] for r in records], dtype=object)
            static["parent"] = np.asarray([r.get("parent") or "" for r in records], dtype=object)
            self._law_static = static
        return self._law_static

    def query_vectors(self, questions: Sequence[str]) -> np.ndarray | None:
        """Each question's vector and its expanded question's, in one call: (n, 2, dim)."""
        both = self.query_and_context_vectors(questions, ())
        return None if both is None else both[0]

    def query_and_context_vectors(
        self, questions: Sequence[str], contexts: Sequence[str]
    ) -> tuple[np.ndarray, np.ndarray] | None:
        """:meth:`query_vectors` and the vectors of ``contexts`` (the earlier questions of follow-ups) in the same
        model call: a follow-up then costs no call of its own."""
        if self.encoder is None:
            return None
        texts = [t for q in questions for t in (q, q if "lexicon" in self.without else expanded_question(q))]
        encoded = np.asarray(self.encoder.encode_queries(texts + list(contexts)), dtype=np.float32)
        return encoded[: len(texts)].reshape(len(questions), 2, -1), encoded[len(texts) :]

    def candidates(
        self,
        question: str,
        allowed: np.ndarray | None,
        vectors: np.ndarray | None,
        reader: np.ndarray | None = None,
        context: dict | None = None,
    ) -> Candidates:
        """A question's candidates with all their features (:meth:`collect` then :meth:`featurize`)."""
        return self.featurize(self.collect(question, allowed, vectors, reader, context), allowed, vectors)

    def read_context(self, context, allowed: np.ndarray | None, vector: np.ndarray | None = None) -> dict:
        """What a conversation's context (:class:`~..conversation.Context`) gives the ranking: the earlier
        questions' words and dense vector (``vector`` when it was encoded with the question), the articles cited
        before and the laws cited or named."""
        from ..conversation import resolve

        a = self.articles
        cited, law_ids = resolve(context, a, self.law_names)
        if allowed is not None:
            cited = [x for x in cited if allowed[x]]
        static = self.law_static()
        out = {"terms": a.term_ids(context.text), "cited": np.asarray(cited, dtype=np.int64),
               "laws": np.flatnonzero(np.isin(static["law_id"], sorted(law_ids))), "vector": None}  # fmt: skip
        if vector is not None:
            out["vector"] = np.asarray(vector, dtype=np.float32)
        elif self.encoder is not None:
            out["vector"] = np.asarray(self.encoder.encode_queries([context.text]), dtype=np.float32)[0]
        return out

    def collect(
        self,
        question: str,
        allowed: np.ndarray | None,
        vectors: np.ndarray | None,
        reader: np.ndarray | None = None,
        context: dict | None = None,
    ) -> Candidates:
        """The candidate articles of a question (the union of every source, in the order found); ``reader``: the
        question's reader vector (or its views, the query view first), which finds the laws it is about when
        the index keeps its laws read; ``context``: a conversation's (:meth:`read_context`), whose earlier
        questions, cited articles and laws bring candidates of their own."""
        a = self.articles
        terms = a.term_ids(question)
        legal = [] if "lexicon" in self.without else expand(question)
        xterms = a.term_ids(" ".join(legal)) if legal else []
        found = [a.top(terms, self.depth, allowed)[0]]
        if xterms:
            found.append(a.top(xterms, self.depth, allowed)[0])
        if vectors is not None and self.passages is not None:
            found += [top for top, _ in self.passages.top_articles_of(vectors, self.depth, allowed)]
        cover = {} if "titles" in self.without else self.titles.cover(question)
        # The laws the question names by their subject ("omzetbelasting", "paspoort") searched on their own:
        # among 18,000 regulations their articles need not be among the best of all. So are the laws it
        # names ("volgens de Awb", "mijn Wob-verzoek"): a person who names the law means it, in whatever
        # words the rest of the question uses.
        named_laws = set() if "names" in self.without else self.law_names.named(question)
        law_read = None
        scopes = [self._titled_articles(cover, allowed), self._named_articles(named_laws, allowed)]
        if self.laws_read is not None and reader is not None:
            # The laws the reader finds nearest the question, searched on their own as the named ones are.
            law_read = self.laws_read.cosines(np.atleast_2d(reader)[0])
            scopes.append(self._read_articles(law_read, allowed))
        asked = self._asked(question, allowed, vectors)
        if asked is not None:
            # The articles whose written questions are nearest the question, by words and by meaning, and the
            # articles of the laws whose questions are nearest (a question about a regulation's subject).
            found += [x for x in (asked.get("top_bm"), asked.get("top_de")) if x is not None]
            if asked.get("laws") is not None:
                scopes.append(self._articles_of(asked["laws"], allowed))
        if context is not None:
            # The question with the earlier questions' words, the articles cited before, the laws cited or named
            # (searched with the question's words), and the passages nearest the earlier questions.
            found.append(a.top(terms + context["terms"], self.depth, allowed)[0])
            found.append(context["cited"])
            if len(context["laws"]):
                scopes.append(self._articles_of(context["laws"], allowed))
            if context["vector"] is not None and self.passages is not None:
                found.append(self.passages.top_articles(context["vector"], self.depth, allowed)[0])
        for scope in scopes:
            if scope is not None:
                found.append(a.top(terms, self.depth, scope)[0])
                if vectors is not None and self.passages is not None:
                    found.append(self.passages.top_articles(vectors[0], self.depth, scope)[0])
        union = np.asarray(list(dict.fromkeys(int(x) for f in found for x in f)), dtype=np.int64)
        c = Candidates(question, union)
        c.context = {"terms": terms, "xterms": xterms, "cover": cover, "named": named_laws, "first": found[0],
                     "law_read": law_read, "asked": asked, "conversation": context}  # fmt: skip
        return c

    def _asked(self, question: str, allowed: np.ndarray | None, vectors: np.ndarray | None) -> dict | None:
        """The questions view's scores of every written question for this question (by BM25 and, with the
        dense model's vectors of them, by cosine) and the candidates they bring; None without the view."""
        view = self.questions
        if view is None:
            return None
        bm = view.bm25(question)
        out: dict = {"bm": bm, "bm_top": float(bm.max()) if len(bm) else 0.0}
        best, _ = view.by_article(bm, allowed)
        out["top_bm"] = view.top_articles(best, self.depth)
        cos = view.cosines(vectors[0]) if vectors is not None else None
        if cos is not None:
            if allowed is not None:
                ok = (view.article < 0) | allowed[np.maximum(view.article, 0)]
                cos = np.where(ok, cos, -1.0)
            out["de"] = cos
            out["de_top"] = float(cos.max()) if len(cos) else 0.0
            best, _ = view.by_article(cos, allowed)
            out["top_de"] = view.top_articles(best, self.depth)
            by_law = view.by_law(cos)
            out["law_de"] = by_law
            order = np.argsort(-by_law, kind="stable")
            order = order[np.isfinite(by_law[order])]
            static = self.law_static()
            ids = list(dict.fromkeys(static["law_id"][r] for r in order[: QUESTION_LAWS * 4]))[:QUESTION_LAWS]
            out["laws"] = np.flatnonzero(np.isin(static["law_id"], ids)) if ids else None
        return out

    def featurize(self, c: Candidates, allowed: np.ndarray | None, vectors: np.ndarray | None) -> Candidates:
        """Every feature of a question's candidates (:meth:`collect`'s), in place."""
        if not len(c.articles):
            return c
        a, union = self.articles, c.articles
        terms, xterms, first_found = c.context["terms"], c.context["xterms"], c.context["first"]
        fused, views = a.scores_of(terms, union, allowed)
        c.raw["bm"] = fused
        c.raw.update({f"bm25_{v}": s for v, s in views.items()})
        first = {int(x): r for r, x in enumerate(first_found, 1)}
        c.raw["first_rank"] = np.asarray([first.get(int(x), len(first_found) + 1) for x in union], dtype=np.float64)
        c.raw["xbm"] = a.scores_of(xterms, union, allowed)[0] if xterms else np.zeros(len(union))
        terms_of = question_terms(c.question, a.analyzer.tokens, frames="frames" not in self.without)
        self._text_features(c, terms_of, c.context["cover"], c.context["named"])
        if vectors is not None:
            self._dense_features(c, vectors)
        self._law_features(c)
        for signal in self.without:  # a signal left out counts 0 for every candidate
            for name in HAND_SIGNALS[signal]:
                if name in c.values:
                    c.values[name] = np.zeros(len(c.articles))
        asked = c.context.get("asked")
        if asked is not None:
            self._question_features(c, asked)
        conversation = c.context.get("conversation")
        if conversation is not None:
            self._context_features(c, conversation, allowed)
        law_read = c.context.get("law_read")
        if law_read is not None:
            cos = np.asarray(law_read, dtype=np.float64)[self.ranked_law[c.articles]]
            c.raw["law_read"] = cos
            c.values["law_read"] = minmax(cos)
        return c

    def _context_features(self, c: Candidates, context: dict, allowed: np.ndarray | None) -> None:
        """:data:`CONTEXT_FEATURES` (and with a dense model :data:`CONTEXT_DENSE_FEATURES`) of the candidates."""
        a = self.articles
        n = len(c.articles)
        terms = context["terms"]
        c.values["ctx_bm"] = minmax(a.scores_of(terms, c.articles, allowed)[0]) if terms else np.zeros(n)
        law = self.ranked_law[c.articles]
        c.values["ctx_law"] = np.isin(law, context["laws"]).astype(np.float64)
        cited = context["cited"]
        c.values["ctx_cited"] = np.isin(c.articles, cited).astype(np.float64)
        near = np.zeros(n)
        for x in cited:
            same = law == self.ranked_law[x]
            near = np.maximum(near, np.where(same, 1.0 / (1.0 + np.abs(c.articles - x)), 0.0))
        c.values["ctx_near"] = near
        if context["vector"] is not None:
            rows_of = [range(int(a.first[x]), int(a.first[x] + a.count[x])) for x in c.articles]
            c.values["ctx_de"] = minmax(self._chunk_cosines(context["vector"][None, :], rows_of)[0])

    def _question_features(self, c: Candidates, asked: dict) -> None:
        """Each candidate's written questions against the question (:data:`QUESTION_FEATURES`, and with the dense
        model's vectors :data:`QUESTION_DENSE_FEATURES`); raw values for the confidence."""
        view = self.questions
        n = len(c.articles)
        rows = view.rows_of(c.articles)
        c.context["question_rows"] = rows
        bm, top = asked["bm"], asked["bm_top"]
        best, second = _best_two(bm, rows)
        c.raw["qbm"] = best / top if top > 0 else np.zeros(n)
        c.values["qbm"] = c.raw["qbm"]
        c.values["qbm2"] = second / top if top > 0 else np.zeros(n)
        cos = asked.get("de")
        if cos is None:
            return
        best, second = _best_two(cos, rows, missing=np.nan)
        c.raw["qde"] = np.where(np.isfinite(best), best, -1.0)  # -1: no written question
        floor = np.nanmin(best) if np.isfinite(best).any() else 0.0
        c.values["qde"] = minmax(np.where(np.isfinite(best), best, floor))
        c.values["qde2"] = minmax(np.where(np.isfinite(second), second, floor))
        near = asked["de_top"] - NEAR
        c.values["qde_near"] = np.asarray([min(int((cos[r] >= near).sum()), 3) / 3 for r in rows], dtype=np.float64)
        law = self.ranked_law[c.articles]
        law_cos = asked["law_de"][law]
        floor = np.min(law_cos[np.isfinite(law_cos)]) if np.isfinite(law_cos).any() else 0.0
        c.values["law_q"] = minmax(np.where(np.isfinite(law_cos), law_cos, floor))

    def _read_articles(self, law_read: np.ndarray, allowed: np.ndarray | None) -> np.ndarray | None:
        """The articles in scope of the READ_LAWS laws (by id) the reader finds nearest the question."""
        static = self.law_static()
        order = np.argsort(-law_read, kind="stable")
        if allowed is not None:
            in_scope = np.zeros(len(law_read), dtype=bool)
            in_scope[np.unique(self.ranked_law[allowed])] = True
            order = order[in_scope[order]]
        ids = list(dict.fromkeys(static["law_id"][r] for r in order[: READ_LAWS * 4]))[:READ_LAWS]
        rows = np.flatnonzero(np.isin(static["law_id"], ids))
        return self._articles_of(rows, allowed) if len(rows) else None

    def _named_articles(self, ids: set[str], allowed: np.ndarray | None) -> np.ndarray | None:
        """The articles in scope of the laws ``ids`` (those the question names by title, name or
        abbreviation), or None."""
        if not ids:
            return None
        return self._articles_of(np.flatnonzero(np.isin(self.law_static()["law_id"], list(ids))), allowed)

    def _articles_of(self, rows: np.ndarray, allowed: np.ndarray | None) -> np.ndarray | None:
        """The articles in scope of the law versions ``rows``, or None when there are none."""
        mask = np.isin(self.ranked_law, rows)
        if allowed is not None:
            mask &= allowed
        return mask if mask.any() else None

    def _titled_articles(self, cover: dict[int, float], allowed: np.ndarray | None) -> np.ndarray | None:
        """The articles in scope of the (at most TITLED_LAWS) laws whose titles the question covers most, or
        None. Laws are counted by id, after the scope: versions of one law and laws out of scope (a BES
        twin, another date) take no place."""
        rows = np.asarray([row for row, v in cover.items() if v >= TITLE_COVER], dtype=np.int64)
        mask = self._articles_of(rows, allowed) if len(rows) else None
        if mask is None:
            return None
        static = self.law_static()
        in_scope = np.unique(self.ranked_law[mask])
        order = sorted(in_scope.tolist(), key=lambda r: (-cover[r], -static["cited"][r], r))
        ids = set(list(dict.fromkeys(static["law_id"][r] for r in order))[:TITLED_LAWS])
        keep = [r for r in in_scope.tolist() if static["law_id"][r] in ids]
        return mask & np.isin(self.ranked_law, np.asarray(keep, dtype=np.int64))

    def _text_features(self, c: Candidates, terms: frozenset[str], cover: dict[int, float], named: set[str]) -> None:
        a = self.articles
        paragraphs = a.chunks.paragraphs([int(a.ranked_row[x]) for x in c.articles])
        c.raw["clause"] = np.asarray([lead_overlap(terms, p, a.analyzer.tokens) for p in paragraphs])
        static = self.law_static()
        laws = self.ranked_law[c.articles]
        c.raw["named"] = np.asarray([static["law_id"][x] in named for x in laws], dtype=np.float64)
        c.values.update({"bm": minmax(c.raw["bm"]), "xbm": minmax(c.raw["xbm"])})
        c.values.update({k: c.raw[k] for k in ("clause", "named")})
        c.values["title"] = np.asarray([cover.get(int(x), 0.0) for x in laws], dtype=np.float64)
        for f in ("cited", *KIND_FEATURES):
            c.values[f] = static[f][laws]
        # A BES regulation answers a question about Caribisch Nederland; for any other question it is a
        # twin of the law meant (asked with jurisdiction "all", the BES twins came first).
        c.values["bes"] = static["bes"][laws] * (1.0 if names_bes(c.question) else -1.0)

    def _dense_features(self, c: Candidates, vectors: np.ndarray) -> None:
        a = self.articles
        rows_of = [range(int(a.first[x]), int(a.first[x] + a.count[x])) for x in c.articles]
        # The question and its expanded question in one read of the candidates' passages.
        cosines = self._chunk_cosines(vectors[:2], rows_of)
        for name, cos in zip(("de", "xde"), cosines):
            c.raw[name] = cos
            c.values[name] = minmax(cos)
        c.raw["place"] = self._place_cosines(vectors[0], c.articles)
        c.values["place"] = minmax(c.raw["place"])

    def _chunk_cosines(self, queries: np.ndarray, rows_of: list[range]) -> np.ndarray:
        """Each candidate's best passage cosine for each query (one row per query)."""
        if self.passages is None:
            return self._cached_chunk_cosines(queries, rows_of)
        out = self.passages.article_cosines_of(queries, rows_of)
        missing = np.flatnonzero(np.isnan(out[0]))
        if len(missing):  # a partial set of vectors (some kinds precomputed): the rest through the cache
            out[:, missing] = self._cached_chunk_cosines(queries, [rows_of[i] for i in missing])
        return out

    def _cached_chunk_cosines(self, queries: np.ndarray, rows_of: list[range]) -> np.ndarray:
        # No vectors kept with the index for these: the candidates' chunks through the model's cache.
        from ..models.vectors import best_cosines

        chunks = iter(self.articles.chunks.rows([i for r in rows_of for i in r]))
        groups = [[next(chunks).indexed_text for _ in r] for r in rows_of]
        return best_cosines(self.cache, self.encoder, groups, queries)

    def _place_cosines(self, query: np.ndarray, articles: np.ndarray) -> np.ndarray:
        if self.passages is None:
            return self._cached_place_cosines(query, articles)
        out = self.passages.place_cosines(query, articles)
        missing = np.flatnonzero(np.isnan(out))
        if len(missing):
            out[missing] = self._cached_place_cosines(query, articles[missing])
        return out

    def _cached_place_cosines(self, query: np.ndarray, articles: np.ndarray) -> np.ndarray:
        from .passages import place_text

        firsts = self.articles.chunks.rows([int(self.articles.first[x]) for x in articles])
        titles = self.articles.chunks.titles([int(self.articles.ranked_row[x]) for x in articles])
        texts = [place_text(ch.law, ch.path_label, t) for ch, t in zip(firsts, titles)]
        return self.cache.vectors(texts, self.encoder) @ query

    def _law_features(self, c: Candidates) -> None:
        law = self.ranked_law[c.articles]
        static = self.law_static()
        ids, parents = static["law_id"][law], static["parent"][law]
        present, rested_on = set(ids), set(parents) - {""}
        # Weighed by the model (a decree may answer better than its law): a relation, not a rule.
        c.values["implements"] = np.asarray([p in present for p in parents], dtype=np.float64)
        c.values["implemented"] = np.asarray([i in rested_on for i in ids], dtype=np.float64)
        c.values["law_bm"] = _law_best(c.values["bm"], law)
        if "de" in c.values:
            c.values["law_de"] = _law_best(c.values["de"], law)
            nearest = np.argsort(-c.raw["de"], kind="stable")[:SHARE_OF]
            share = {int(k): n / SHARE_OF for k, n in zip(*np.unique(law[nearest], return_counts=True))}
            c.values["law_share"] = np.asarray([share.get(int(x), 0.0) for x in law])


def _best_two(scores: np.ndarray, rows: list[np.ndarray], missing: float = 0.0) -> tuple[np.ndarray, np.ndarray]:
    """Each group's best and second best score (``missing`` where it has none)."""
    best = np.full(len(rows), missing, dtype=np.float64)
    second = np.full(len(rows), missing, dtype=np.float64)
    for i, r in enumerate(rows):
        if len(r) == 1:
            best[i] = scores[r[0]]
        elif len(r) > 1:
            two = np.partition(scores[r], len(r) - 2)[-2:]
            best[i], second[i] = two[1], two[0]
    return best, second


def ranked_hits(features: CandidateFeatures, c: Candidates, scores: np.ndarray, k: int, name: str) -> list[Hit]:
    """The k best candidates as hits, each carrying its features (confidence and the API read them)."""
    if not len(c.articles):
        return []
    a = features.articles
    order = np.lexsort((c.articles, -scores))[:k]
    views = {v: c.raw[f"bm25_{v}"][order] for v in ("chunk", "article", "heading")}
    terms = a.term_ids(c.question)
    hits = a.hits(c.articles[order], scores[order], views, terms)
    by_doc = {int(x): i for i, x in enumerate(c.articles)}
    out = []
    for rank, h in enumerate(hits, 1):
        i = by_doc[h.features["doc"]]
        extra = {f"f_{n}": float(v[i]) for n, v in c.values.items()}
        extra |= {n: float(c.raw[n][i]) for n in ("de", "xde", "place", "clause", "read", "read_sts", "qbm", "qde",
                                                   "qread") if n in c.raw}  # fmt: skip
        extra |= {"first": float(c.raw["bm"][i]), "first_rank": int(c.raw["first_rank"][i])}
        if "de" in c.raw:
            extra["dense"] = float(c.raw["de"][i])
        out.append(Hit(h.chunk, h.score, rank, name, h.article_chunks, h.article_paragraphs, {**h.features, **extra}))
    return out
