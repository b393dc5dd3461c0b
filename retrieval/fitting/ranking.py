"""Fitting the learned ranking and the confidence on questions with gold, cross-validated (``wetqa fit``).

    wetqa fit ranking --index DIR [--index DIR] --dataset FILE [--dataset FILE ...] [--folds 5] [--reader MODEL|none]
    wetqa fit confidence --index DIR [...] --dataset FILE [...] [--budget 0.10] [--budget-whole 0.05] [--sweep]

Every dataset is a question set (its file name), JSON lines with gold articles (``articles``: law id and
label) or, for questions answered by a law rather than an article, gold laws (``laws``). A set is used on
an index that holds its gold laws (for the ranking), and tells answerable from not (for the confidence).

**Ranking.** Each question's candidates and features come from the pipeline's own code
(:class:`~.candidates.CandidateFeatures`), once with the dense signals (the index's re-scoring model) and
once without. One model per pipeline key (``articles``, ``articles+dense``, their ``+reader`` twins and the
``@whole`` ones of an index of the whole BWB), each a softmax over a question's candidates towards its gold
ones (L2), every question set weighing the same. With a reader the pipeline has two learned stages: the
first model's ``read_depth`` best candidates are read, and a second model weighs all features and the
reader's. Cross-validation follows the pipeline: inside each fold both models are fitted on the other
folds, the reader reads the first model's choice, and the held-out questions are ranked by both.

**Confidence.** Each question goes through the whole pipeline of a key (its fitted ranking models); a
logistic regression over the confidence signals (standardised, L2) tells answerable questions (the index
holds their gold laws) from the others, and the threshold keeps at most ``budget`` of a fold's answerable
questions from abstaining. Cross-validated the same way.

A fitted model records what it was fitted on: the datasets' SHA-256, the indexes' corpus hashes, the
reader, the code version, the folds and the cross-validated figures.
"""

from __future__ import annotations

import hashlib
import json
import math
import pickle
import sys
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np

from .._base import RetrievalError
from ..articles.candidates import (
    CONTEXT_DENSE_FEATURES,
    CONTEXT_FEATURES,
    DENSE_FEATURES,
    FEATURES,
    LAW_READ_FEATURES,
    QUESTION_DENSE_FEATURES,
    QUESTION_FEATURES,
    RELATION_FEATURES,
    CandidateFeatures,
    Candidates,
    model_key,
    with_context,
)
from ..articles.reader import READ_CONTEXT_FEATURES, READ_DEPTH, READ_QUESTION_FEATURES, READER_FEATURES
from ..conversation import Context

L2 = 1.0
ITERATIONS = 400


# ------------------------------------------------------------------------------------------- questions
@dataclass(frozen=True, slots=True)
class FitQuestion:
    id: str
    set: str
    question: str
    gold: frozenset[str]  # article keys (law id | label); empty: the question is answered by a law
    laws: frozenset[str]  # the laws that answer it
    messages: tuple = ()  # a conversation's messages (the question is its last user message); () a single question


def load_sets(paths: Sequence[str | Path]) -> dict[str, list[FitQuestion]]:
    """Each dataset's questions, by the dataset's file name (a name given twice is refused)."""
    from wetqa.corpus.dataset import DatasetError, load_dataset

    sets: dict[str, list[FitQuestion]] = {}
    for path in paths:
        name = Path(path).stem
        if name in sets:
            raise RetrievalError(f"two datasets named {name!r}: give each question set a file name of its own")
        items = load_dataset(path)
        questions = []
        for item in items:
            laws = frozenset(a.law_id for a in item.articles) or frozenset(item.laws)
            if not laws:
                raise DatasetError(f"{path}: question {item.id!r} names no gold article and no gold law")
            # A bare number (the benchmark's ids) is named by its set, so ids stay apart across sets.
            qid = f"{name}-{item.id}" if item.id.isdigit() else item.id
            messages = tuple((m["role"], m["content"]) for m in item.messages)
            questions.append(FitQuestion(qid, name, item.question, frozenset(item.gold_keys), laws, messages))
        sets[name] = questions
    return sets


def datasets_digest(paths: Sequence[str | Path]) -> dict[str, str]:
    return {Path(p).name: hashlib.sha256(Path(p).read_bytes()).hexdigest() for p in paths}


# ------------------------------------------------------------------------------------------ candidates
@dataclass(slots=True)
class Prepared:
    """One index's candidates for the questions it can be asked, with or without the dense signals."""

    path: Path
    index: object
    features: CandidateFeatures
    dense: bool
    whole: bool
    reader: object = None  # the reader its candidates were found with (the laws it read), or None
    vectors: dict[str, np.ndarray] = field(default_factory=dict)  # question -> its reader vector
    # A conversation's follow-up: its context (retrieval.conversation.Context) and its reader vector read with the
    # earlier questions before it, by question id.
    contexts: dict[str, Context] = field(default_factory=dict)
    in_context: dict[str, np.ndarray] = field(default_factory=dict)
    items: list[tuple[FitQuestion, Candidates]] = field(default_factory=list)
    keys: dict[int, tuple[str, str]] = field(default_factory=dict)  # candidate -> (article key, law id)

    @property
    def key(self) -> str:
        return model_key(
            dense=self.dense,
            whole=self.whole,
            reader=self.reader is not None,
            questions=self.features.questions is not None,
        )

    def labels(self, q: FitQuestion, c: Candidates) -> tuple[np.ndarray, np.ndarray]:
        keys = [self.keys[int(x)] for x in c.articles]
        return np.asarray([k in q.gold for k, _ in keys]), np.asarray([law in q.laws for _, law in keys])


def prepare(
    path: str | Path,
    sets: dict[str, list[FitQuestion]],
    dense: bool,
    progress: bool = True,
    answerable: bool = True,
    reader=None,
    without: frozenset[str] = frozenset(),
    questions: bool = True,
) -> Prepared | None:
    """The candidates of every question whose laws the index holds (``answerable=False``: of every question),
    computed by the pipeline's code and cached by the index's files, the code and the questions; with a
    ``reader``, found with the laws it read too; with ``questions``, reading the index's questions view when
    it keeps one. None: the index has no dense model and ``dense`` was asked, or it keeps no laws read by
    ``reader``."""
    from wetqa.home import cache_root

    from ..articles.questions_view import QuestionsView
    from ..articles.reader import LawReader
    from ..engines.index import dense_parts, load_index, read_index_meta
    from ..scope import holds_whole_bwb

    path = Path(path)
    meta = read_index_meta(path)
    model = (meta.get("rescore") or {}).get("model")
    if dense and not model:
        return None
    index = load_index(path)
    laws = index.laws
    if laws is None:
        raise RetrievalError(f"{path}: fitting needs an articles index (its law table)")
    held = set(laws.ids)
    view = QuestionsView.load(path, index) if questions else None
    if dense and model:
        encoder, cache, passages = dense_parts(index, path, model)
        features = CandidateFeatures(index, passages, encoder, cache, without=without, questions=view)
    else:
        features = CandidateFeatures(index, without=without, questions=view)
    asked = [q for qs in sets.values() for q in qs if not answerable or q.laws <= held]
    prep = Prepared(path, index, features, dense, holds_whole_bwb(held))
    from ..conversation import Conversation

    for q in asked:
        if q.messages:
            context = Conversation.of([{"role": r, "content": t} for r, t in q.messages]).context(features.law_names)
            if context is not None:
                prep.contexts[q.id] = context
    if reader is not None:
        features.laws_read = LawReader.load(path, reader)
        if features.laws_read is None:
            return None
        prep.reader = reader
        texts = sorted({q.question for q in asked})
        prep.vectors = dict(zip(texts, reader.views(texts))) if texts else {}
        followed = sorted(prep.contexts)
        if followed:
            read = reader.questions([f"{prep.contexts[i].text} {next(q.question for q in asked if q.id == i)}"
                                     for i in followed])  # fmt: skip
            prep.in_context = dict(zip(followed, read))
    ident = json.dumps(
        [meta.get("files"), model, dense, code_fingerprint(), [(q.id, q.question, q.messages) for q in asked],
         reader.identity() if reader is not None else None, sorted(without), view is not None]
    )  # fmt: skip
    store = cache_root() / "fit" / f"candidates-{hashlib.sha1(ident.encode()).hexdigest()[:20]}.pkl"
    if store.is_file():
        cands = pickle.loads(store.read_bytes())
    else:
        cands = _candidates(prep, asked, progress)
        from wetqa.io import atomic_file

        with atomic_file(store, "wb") as fh:  # a temporary of its own: two fits of the same inputs do not collide
            fh.write(pickle.dumps(cands))
    prep.items = list(zip(asked, cands))
    _keys(prep)
    return prep


def _candidates(prep: Prepared, questions: list[FitQuestion], progress: bool) -> list[Candidates]:
    from tqdm import tqdm

    f = prep.features
    vectors = f.query_vectors([q.question for q in questions]) if prep.dense else None
    out = []
    for i, q in enumerate(tqdm(questions, desc=f"candidates {prep.path.name}", disable=not progress, leave=False)):
        allowed = prep.index.allowed(None, q.question)  # type: ignore[attr-defined]
        context = prep.contexts.get(q.id)
        read_context = f.read_context(context, allowed) if context is not None else None
        c = f.candidates(q.question, allowed, None if vectors is None else vectors[i], prep.vectors.get(q.question),
                         read_context)  # fmt: skip
        c.context = {}  # what collecting found is not needed again (and not worth caching)
        out.append(c)
    return out


def _keys(prep: Prepared) -> None:
    from wetqa.corpus.dataset import article_key

    a = prep.index
    missing = sorted({int(x) for _, c in prep.items for x in c.articles} - set(prep.keys))
    for start in range(0, len(missing), 2000):
        part = missing[start : start + 2000]
        for x, chunk in zip(part, a.chunks.rows([int(a.first[x]) for x in part])):  # type: ignore[attr-defined]
            prep.keys[x] = (article_key(chunk.law_id, chunk.article), chunk.law_id)


def code_fingerprint() -> str:
    """The retrieval code's hash: candidates cached by another ranking's code are not reused."""
    folder = Path(__file__).resolve().parent.parent
    digest = hashlib.sha1()
    for path in sorted([*folder.rglob("*.py"), *folder.rglob("*.tsv")]):
        digest.update(str(path.relative_to(folder)).encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()


# ----------------------------------------------------------------------------------------- the fitting
def softmax_fit(
    rows: list[tuple[np.ndarray, np.ndarray, float]], d: int, l2: float = L2, iterations: int = ITERATIONS
) -> np.ndarray:
    """Softmax over each question's candidates towards its gold ones (L2), by gradient descent; rows are
    (features, gold, weight) over ``d`` features (no rows: all weights 0)."""
    if not rows:
        return np.zeros(d)
    w = np.zeros(d)
    step = 0.5
    total = sum(r[2] for r in rows)
    for _ in range(iterations):
        grad = np.zeros(d)
        for x, y, weight in rows:
            s = x @ w
            p = np.exp(s - s.max())
            p /= p.sum()
            grad += weight * (x.T @ (p - y / y.sum()))
        w -= step * (grad / total + l2 * w / total)
    return w


def set_weights(names: list[str]) -> list[float]:
    """A weight per question so that every question set (of each index) weighs the same."""
    counts = Counter(names)
    return [len(names) / (len(counts) * counts[n]) for n in names]


@dataclass(slots=True)
class Example:
    """One question on one index, as the fitting sees it."""

    fold: int
    prep: Prepared
    q: FitQuestion
    c: Candidates
    reader: np.ndarray | None = None  # the question's reader views (Reader.views: the query view first)
    train: bool = True  # fitted on (False: only ranked, held out: a follow-up read alone, for the base models)
    in_context: np.ndarray | None = None  # a follow-up's reader vector read with the earlier questions


def _rows(examples: list[Example], matrices: list[np.ndarray], tops: list[np.ndarray] | None = None) -> list:
    """Fitting rows of the examples whose gold is among their (read) candidates, each set weighing the same."""
    kept = []
    for i, e in enumerate(examples):
        if not e.train:
            continue
        gold = e.prep.labels(e.q, e.c)[0]
        if tops is not None:
            gold = gold[tops[i]]
        if gold.any():
            kept.append((i, gold))
    weights = set_weights([f"{examples[i].prep.path}|{examples[i].q.set}" for i, _ in kept])
    return [(matrices[i], gold.astype(float), w) for (i, gold), w in zip(kept, weights)]


def _read(e: Example, reader, top: np.ndarray) -> Candidates:
    """A copy of the example's candidates with the reader's features of the candidates ``top``."""
    from ..articles.reader import read_candidates

    c = replace(e.c, values=dict(e.c.values), raw=dict(e.c.raw))
    order = np.full(len(c.articles), -np.inf)
    order[top] = -np.arange(len(top), dtype=float)  # the given order, best first
    c.scores = order
    assert e.reader is not None, "the reader's question vectors are computed before the folds"
    read_candidates(reader, e.prep.index, c, e.reader, len(top), e.prep.features.questions, e.in_context)
    return c


@dataclass(slots=True)
class Fitted:
    """A pipeline key's models (the first stage's, and with a reader the second's) and the held-out rows."""

    key: str
    features: list[str]
    weights: np.ndarray
    read_features: list[str] | None = None
    read_weights: np.ndarray | None = None
    held: list[dict] = field(default_factory=list)  # held out, ranked by the whole pipeline (with its reader)
    held_first: list[dict] = field(default_factory=list)  # held out, ranked by the first model alone


def fit_key(key: str, examples: list[Example], features: list[str], folds: int, reader=None, depth: int = READ_DEPTH,
            progress: bool = True, tested: dict[tuple, Example] | None = None) -> Fitted:  # fmt: skip
    """Cross-validated and final models of one pipeline key over its examples; ``tested`` (by index path and
    question id): the example a held-out question is ranked as instead (its candidates found otherwise: with
    the lexicon held out, say)."""
    from tqdm import tqdm

    read_features = [*features, *_read_features_of(key)] if reader is not None else None
    held: list[dict] = []
    held_first: list[dict] = []
    for f in tqdm(range(folds), desc=f"folds {key}", disable=not progress, leave=False):
        train = [e for e in examples if e.fold != f]
        w1 = softmax_fit(_rows(train, [e.c.matrix(features) for e in train]), len(features))
        w2 = None
        if reader is not None and read_features is not None:
            tops = [_top(e.c.matrix(features) @ w1, e.c, depth) for e in train]
            read = [_read(e, reader, t) for e, t in zip(train, tops)]
            w2 = softmax_fit(
                _rows(train, [c.matrix(read_features)[t] for c, t in zip(read, tops)], tops), len(read_features)
            )
        for e in examples:
            if e.fold == f:
                e = (tested or {}).get(_tested_key(e.prep, e.q.id), e)
                first = _held(e, features, w1, None, None, None, depth)
                held_first.append(first)
                held.append(_held(e, features, w1, read_features, w2, reader, depth) if w2 is not None else first)
    w1 = softmax_fit(_rows(examples, [e.c.matrix(features) for e in examples]), len(features))
    out = Fitted(key, features, w1, held=held, held_first=held_first)
    if reader is not None and read_features is not None:
        tops = [_top(e.c.matrix(features) @ w1, e.c, depth) for e in examples]
        read = [_read(e, reader, t) for e, t in zip(examples, tops)]
        out.read_features = read_features
        out.read_weights = softmax_fit(
            _rows(examples, [c.matrix(read_features)[t] for c, t in zip(read, tops)], tops), len(read_features)
        )
    return out


def _read_features_of(key: str) -> list[str]:
    """The reader's features the second learned model weighs. The question's sentence-similarity view
    (``read_sts``) is left out of the whole BWB's models: cross-validated there it moved the right article
    first up by one question and the right law first down by seven (docs/results.md)."""
    used = [f for f in READER_FEATURES if not (key.endswith("@whole") and f == "read_sts")]
    used += list(READ_QUESTION_FEATURES) if "+questions" in key else []
    return used + (list(READ_CONTEXT_FEATURES) if "+context" in key else [])


def _tested_key(prep: Prepared, qid: str) -> tuple:
    return (str(prep.path), prep.dense, prep.reader is not None, qid)


def _top(scores: np.ndarray, c: Candidates, depth: int) -> np.ndarray:
    return np.lexsort((c.articles, -scores))[:depth]


def _held(e: Example, features, w1, read_features, w2, reader, depth) -> dict:
    """A held-out question ranked by its fold's models: where its gold and its law came."""
    c = e.c
    if not len(c.articles):
        return _result(e, np.zeros(0, dtype=np.int64))
    scores = c.matrix(features) @ w1
    if w2 is not None:
        top = _top(scores, c, depth)
        read = _read(e, reader, top)
        second = read.matrix(read_features)[top] @ w2
        rank_before = np.argsort(np.argsort(-scores, kind="stable"), kind="stable")
        scores = -1e9 - rank_before.astype(float)
        scores[top] = second
    return _result(e, np.lexsort((c.articles, -scores)))


def _result(e: Example, order: np.ndarray) -> dict:
    q = e.q
    if not len(order):
        return {"q": q, "prep": e.prep, "hit1": 0.0, "hit3": 0.0, "rr": 0.0, "law1": 0.0, "rank": None, "top": None,
                "law_among": 0.0}  # fmt: skip
    gold, law = e.prep.labels(q, e.c)
    ranks = np.flatnonzero(gold[order])
    rank = int(ranks[0]) + 1 if len(ranks) else None
    return {
        "q": q, "prep": e.prep, "hit1": float(rank == 1), "hit3": float(rank is not None and rank <= 3),
        "rr": 1 / rank if rank else 0.0, "law1": float(law[order[0]]), "rank": rank,
        "top": int(e.c.articles[order[0]]), "law_among": float(law.any()),
    }  # fmt: skip


def check_folds(questions: int, folds: int) -> None:
    """Every fold holds a question out: fewer questions than folds is a usage error, not empty folds."""
    if questions < folds:
        raise RetrievalError(
            f"{questions} questions for {folds} folds: cross-validation needs a question in every fold; give more "
            f"questions (--dataset) or fewer --folds"
        )


def folds_of(ids: Sequence[str], folds: int, seed: int = 0) -> dict[str, int]:
    ids = sorted(set(ids))
    return {qid: i % folds for i, qid in enumerate(np.random.default_rng(seed).permutation(ids))}


def fit_ranking(
    indexes: Sequence[str | Path],
    datasets: Sequence[str | Path],
    folds: int = 5,
    reader: str | None = None,
    depth: int = READ_DEPTH,
    progress: bool = True,
    without: frozenset[str] = frozenset(),
    dense_only: bool = False,
    tested_without: frozenset[str] = frozenset(),
    questions: bool = True,
    contexts: bool = True,
) -> dict:
    """Every pipeline key's ranking models over these indexes and datasets, cross-validated (``without``:
    hand-written signals left out; ``dense_only``: the pipelines with the dense signals alone;
    ``tested_without``: signals left out of the held-out questions only, the models fitted with them: a
    signal written while the questions were at hand, held out with them); returns
    ``{"models": {key: spec}, "held": {key: [rows]}}`` (the rows of :func:`report`)."""
    from wetqa import __version__

    from ..articles.reader import Reader

    sets = load_sets(datasets)
    reading = Reader(reader) if reader else None
    preps = [
        p
        for path in indexes
        for dense in ((True,) if dense_only else (True, False))
        for read in ((None, reading) if reading is not None else (None,))
        if (p := prepare(path, sets, dense, progress, reader=read, without=without, questions=questions))
    ]
    fold_of = folds_of([q.id for p in preps for q, _ in p.items], folds)
    if not fold_of:
        raise RetrievalError(
            "the indexes hold the gold law of no question of these datasets: nothing to fit the ranking on (give an "
            "index that holds them, or questions about its laws)"
        )
    check_folds(len(fold_of), folds)
    tested: dict[tuple, Example] = {}
    if tested_without:
        for p in preps:
            other = prepare(p.path, sets, p.dense, progress, reader=p.reader, without=without | tested_without,
                            questions=questions)  # fmt: skip
            assert other is not None
            tested.update({_tested_key(p, q.id): Example(fold_of[q.id], other, q, c, other.vectors.get(q.question))
                           for q, c in other.items})  # fmt: skip
    by_key: dict[str, list[Example]] = {}
    contexts = contexts and any(p.contexts for p in preps)  # +context models only where there are follow-ups
    for p in preps:
        keys = [p.key]
        if p.whole and not p.dense:
            # The model without dense signals for a part of the BWB is fitted on every index's questions: fitted
            # on the 272 laws' alone it ranked their dev questions better but refused far fewer questions
            # outside the corpus (the README's history).
            keys.append(model_key(dense=False, reader=p.reader is not None, questions=p.features.questions is not None))
        for q, c in p.items:
            followed = q.id in p.contexts
            for key in keys:
                example = Example(fold_of[q.id], p, q, c, p.vectors.get(q.question), in_context=p.in_context.get(q.id))
                if not followed:
                    # A single question (or a conversation's question that changed the subject: read alone, ranked
                    # by the base models but never fitted on: the single questions' rows stay as they were).
                    by_key.setdefault(key, []).append(replace(example, train=not q.messages))
                if contexts and (followed or not q.messages):
                    # The follow-ups' models: fitted on the follow-ups and on the single questions beside them.
                    by_key.setdefault(with_context(key), []).append(example)
    models, held = {}, {}
    provenance = {
        "datasets": datasets_digest(datasets), "code": __version__, "code_fingerprint": code_fingerprint()[:16],
        "folds": folds, "l2": L2,
    }  # fmt: skip
    for key, examples in by_key.items():
        reads = "+reader" in key
        features = _features_of(key)
        fitted = fit_key(key, examples, features, folds, reading if reads else None, depth, progress, tested or None)
        indexes_of = sorted({str(e.prep.path) for e in examples})
        base = {
            "fitted_on": f"{len(examples)} questions over {len(indexes_of)} index(es)",
            "provenance": {**provenance, "indexes": [_corpus_hash(p) for p in indexes_of]},
        }
        if not reads:
            models[key] = {"features": features, "weights": _rounded(fitted.weights), **base,
                           "cv": summary(fitted.held_first)}  # fmt: skip
            held[key] = fitted.held_first
            continue
        assert reading is not None
        models[key] = {
            "features": fitted.read_features, "weights": _rounded(fitted.read_weights), **base,
            "reader": reading.identity() | {"depth": depth},
            "first": {"features": features, "weights": _rounded(fitted.weights)}, "cv": summary(fitted.held),
        }  # fmt: skip
        held[key] = fitted.held
    return {"models": models, "held": held, "folds": fold_of}


def _features_of(key: str) -> list[str]:
    """The first learned model's features for a pipeline key (the reader's are added after it reads)."""
    used = list(FEATURES) if "+dense" in key else [f for f in FEATURES if f not in DENSE_FEATURES]
    if "+questions" in key:
        used += list(QUESTION_FEATURES) + (list(QUESTION_DENSE_FEATURES) if "+dense" in key else [])
    if "+context" in key:
        used += list(CONTEXT_FEATURES) + (list(CONTEXT_DENSE_FEATURES) if "+dense" in key else [])
    if "+reader" in key:
        used += list(LAW_READ_FEATURES)
    if not key.endswith("@whole"):
        # Decrees beside the laws they rest on meet only among the whole BWB's kinds (the 272 laws are all
        # formal laws); in the general model fitted on both corpora they cost abstention (README's history).
        used = [f for f in used if f not in RELATION_FEATURES]
    return used


def _rounded(w) -> list[float]:
    return [round(float(v), 5) for v in w]


def _corpus_hash(path: str) -> str | None:
    from ..engines.index import read_index_meta

    return read_index_meta(path).get("corpus_hash")


def summary(rows: list[dict]) -> dict:
    """Per index and set: n, article Hit@1 / Hit@3 / MRR (questions with gold articles), law Hit@1."""
    out: dict[str, dict] = {}
    groups: dict[tuple[str, str], list[dict]] = {}
    for r in rows:
        groups.setdefault((r["prep"].path.name, r["q"].set), []).append(r)
    for (index, name), rs in sorted(groups.items()):
        gold = [r for r in rs if r["q"].gold]
        cell = {"n": len(rs), "law_hit1": round(float(np.mean([r["law1"] for r in rs])), 3),
                "law_among": round(float(np.mean([r["law_among"] for r in rs])), 3)}  # fmt: skip
        if gold:
            cell |= {m: round(float(np.mean([r[k] for r in gold])), 3) for m, k in
                     (("hit1", "hit1"), ("hit3", "hit3"), ("mrr", "rr"))}  # fmt: skip
        out[f"{index}/{name}"] = cell
    return out


def report(key: str, rows: list[dict]) -> str:
    lines = [f"{key}: cross-validated, first article"]
    for where, cell in summary(rows).items():
        index, name = where.split("/", 1)
        line = f"  {index:14s} {name:13s} n={cell['n']:3d}  law Hit@1 {cell['law_hit1']:.3f}"
        if "hit1" in cell:
            line += f"  Hit@1 {cell['hit1']:.3f}  Hit@3 {cell['hit3']:.3f}  MRR {cell['mrr']:.3f}"
        lines.append(line + f"  (gold law among the candidates {cell['law_among']:.3f})")
    return "\n".join(lines)


def per_question(key: str, rows: list[dict]) -> list[dict]:
    """Each held-out question's result: its first article and law, and where its gold came."""
    out = []
    for r in rows:
        q, p = r["q"], r["prep"]
        first = p.keys.get(r["top"]) if r["top"] is not None else None
        out.append({
            "model": key, "index": p.path.name, "index_path": str(p.path), "set": q.set, "id": q.id,
            "question": q.question, "gold_articles": sorted(q.gold), "gold_laws": sorted(q.laws),
            "first_article": first[0] if first else None, "first_law": first[1] if first else None,
            "first_row": r["top"], "law_hit1": r["law1"], "hit1": r["hit1"] if q.gold else None,
            "gold_rank": r["rank"] if q.gold else None,
        })  # fmt: skip
    return out


# The key every model of a kind has, and no model of the other kind: what tells their files apart.
MODEL_MARK = {"ranking": "weights", "confidence": "coef"}


def write_models(path: str | Path, models: dict, kind: str) -> Path:
    """``kind``'s models merged into the JSON file at ``path`` (a refit of some keys keeps the others),
    atomically; none fitted is an error, not an empty file."""
    from wetqa.io import atomic_file

    path = Path(path)
    if not models:
        raise RetrievalError(f"no {kind} model was fitted: fitting needs an articles index (its law table)")
    shipped = models_in(path, kind) if path.exists() else {}
    with atomic_file(path) as fh:
        fh.write(json.dumps(shipped | models, indent=2) + "\n")
    return path


def models_in(path: Path, kind: str) -> dict:
    """The models already in ``path``, when it is a file of ``kind``'s models (``wetqa fit KIND``'s); any other
    file, the other kind's models included, is not wetqa's to merge into."""
    mark = MODEL_MARK[kind]
    try:
        models = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        why = f"{type(exc).__name__}: {exc}"
    else:
        if isinstance(models, dict) and models and all(isinstance(m, dict) and mark in m for m in models.values()):
            return models
        why = f"not {kind} models"
    raise RetrievalError(
        f"{path} is not a {kind} models file wetqa wrote ({why[:120]}); wetqa will not overwrite it: give another --out"
    )


def shipped_path(kind: str) -> Path:
    """The model file the package ships (``ranking.json``, ``confidence.json``), beside the stages that read it."""
    from importlib import resources

    return Path(str(resources.files("wetqa.retrieval.ranking").joinpath(f"{kind}.json")))


# ------------------------------------------------------------------------------------------ confidence
def logistic_fit(x: np.ndarray, y: np.ndarray, l2: float = 2.0, iterations: int = 50) -> tuple[np.ndarray, float]:
    """L2-penalised logistic regression by Newton's method (the intercept unpenalised)."""
    n, d = x.shape
    a = np.hstack([x, np.ones((n, 1))])
    w = np.zeros(d + 1)
    penalty = np.diag([l2] * d + [0.0])
    for _ in range(iterations):
        p = 1 / (1 + np.exp(-(a @ w)))
        grad = a.T @ (p - y) + penalty @ w
        hess = a.T @ (a * (p * (1 - p))[:, None]) + penalty + 1e-9 * np.eye(d + 1)
        step = np.linalg.solve(hess, grad)
        w -= step
        if np.abs(step).max() < 1e-8:
            break
    return w[:d], float(w[d])


def auc(scores: np.ndarray, labels: np.ndarray) -> float:
    pos, neg = scores[labels == 1], scores[labels == 0]
    if not len(pos) or not len(neg):
        return float("nan")
    return float(np.mean([(p > neg).mean() + 0.5 * (p == neg).mean() for p in pos]))


def threshold_for(conf: np.ndarray, answerable: np.ndarray, budget: float) -> float:
    """A threshold at which at most ``budget`` of the answerable questions fall below it: not at the least sure
    one kept (a held-out answerable question a little less sure would abstain) but in the middle, on the
    log-odds scale, of the gap below it."""
    kept = np.sort(conf[answerable])
    allowed = int(np.floor(budget * len(kept)))
    if allowed >= len(kept):
        return 1.0
    keep = float(kept[allowed])
    below = conf[conf < keep]
    if not len(below):
        return keep

    def logit(p: float) -> float:
        p = min(max(p, 1e-9), 1 - 1e-9)
        return math.log(p / (1 - p))

    mid = (logit(keep) + logit(float(below.max()))) / 2
    return float(1 / (1 + math.exp(-mid)))


class LogisticModel:
    def __init__(self, features: list[str], x: np.ndarray, y: np.ndarray, l2: float):
        self.features = features
        self.mean, self.std = x.mean(0), x.std(0) + 1e-9
        self.coef, self.intercept = logistic_fit((x - self.mean) / self.std, y, l2)

    def __call__(self, x: np.ndarray) -> np.ndarray:
        return 1 / (1 + np.exp(-(((x - self.mean) / self.std) @ self.coef + self.intercept)))

    def spec(self, threshold: float, extra: dict) -> dict:
        return {
            "features": self.features,
            "mean": _rounded6(self.mean),
            "std": _rounded6(self.std),
            "coef": _rounded6(self.coef),
            "intercept": round(self.intercept, 6),
            "threshold": round(threshold, 4),
            **extra,
        }


def _rounded6(v) -> list[float]:
    return [round(float(x), 6) for x in v]


@dataclass(slots=True)
class Signals:
    """One question's confidence signals on one index and pipeline, and whether the index answers it."""

    index: str
    set: str
    question: str
    values: dict
    answerable: float


def collect_signals(
    indexes: Sequence[str | Path],
    datasets: Sequence[str | Path],
    reader: str | None = None,
    progress: bool = True,
    questions: bool = True,
) -> dict[str, list[Signals]]:
    """Every question through the pipelines of each index (with the dense signals and without; with the
    reader when one is given), its signals by pipeline key."""
    from tqdm import tqdm

    from ..spec import RetrievalSpec

    sets = load_sets(datasets)
    out: dict[str, list[Signals]] = {}
    for path in indexes:
        from ..engines.index import read_index_meta

        dense_model = (read_index_meta(path).get("rescore") or {}).get("model")
        for dense in [True, False] if dense_model else [False]:
            spec = RetrievalSpec(index=(str(path),), rescore=None if dense else "none", reader=reader or "none",
                                 questions=questions)  # fmt: skip
            from ..articles.stage_list import FITTING_CONFIDENCE

            fitting = FITTING_CONFIDENCE.set(True)  # the pipelines whose confidence is fitted now: none has one yet
            try:
                pipeline = spec.build()
            finally:
                FITTING_CONFIDENCE.reset(fitting)
            if not pipeline.key:
                continue
            held = set(pipeline.index.laws.ids)
            from ..conversation import Conversation

            law_names = pipeline.features.law_names if pipeline.features is not None else None
            for name, qs in sets.items():
                texts = [q.question for q in qs]
                # A conversation's follow-up is read in its context, as a server reads it.
                contexts = [
                    Conversation.of([{"role": r, "content": t} for r, t in q.messages]).context(law_names)
                    if q.messages else None
                    for q in qs
                ]  # fmt: skip
                rankings = []
                for start in tqdm(range(0, len(texts), 16), desc=f"{Path(path).name} {pipeline.key} {name}",
                                  disable=not progress, leave=False):  # fmt: skip
                    rankings += pipeline.rank(texts[start : start + 16], 3, contexts=contexts[start : start + 16])
                for q, r in zip(qs, rankings):
                    row = Signals(Path(path).name, name, q.question, r.signals, float(q.laws <= held))
                    # A follow-up read in its context has a confidence model of its own (+context), fitted on the
                    # follow-ups and the single questions; a question read alone is the base model's.
                    if r.context is None:
                        out.setdefault(pipeline.key, []).append(row)
                    if r.context is not None or not q.messages:
                        out.setdefault(with_context(pipeline.key), []).append(row)
    if not followed_sets(sets):
        out = {key: rows for key, rows in out.items() if "+context" not in key}  # no follow-ups: no such models
    return out


def followed_sets(sets: dict[str, list[FitQuestion]]) -> set[str]:
    """The question sets that hold conversations."""
    return {name for name, qs in sets.items() if any(q.messages for q in qs)}


def fit_confidence(
    rows: list[Signals], features: Sequence[str], folds: int = 5, budget: float = 0.2, l2: float = 2.0
) -> tuple[dict, dict]:
    """(the model's spec, the cross-validated abstention per index, set and label)."""
    from ..ranking.confidence import capped

    check_folds(len(rows), folds)
    used = [f for f in features if all(f in r.values for r in rows)]
    x = np.asarray([[r.values[f] for f in used] for r in rows], dtype=np.float64)
    y = np.asarray([r.answerable for r in rows])
    if y.min() == y.max():  # one class: no threshold tells answerable from not (AUC nan, threshold 1.0)
        what = "answerable" if y[0] else "unanswerable"
        raise RetrievalError(
            f"every question is {what} on these indexes: the confidence is fitted on questions the index holds the "
            "gold laws of and questions it does not; give a question set of the other kind too (--dataset)"
        )
    order = np.random.default_rng(0).permutation(len(y))
    held_conf = np.zeros(len(y))
    held_abstain = np.zeros(len(y), dtype=bool)

    def confidences(idx: np.ndarray, model: LogisticModel) -> np.ndarray:
        return np.asarray([capped(rows[i].values, float(c)) for i, c in zip(idx, model(x[idx]))])

    for f in range(folds):
        test = order[f::folds]
        train = np.setdiff1d(np.arange(len(y)), test)
        model = LogisticModel(used, x[train], y[train], l2)
        t = threshold_for(confidences(train, model), y[train] == 1, budget)
        held_conf[test] = confidences(test, model)
        named = np.asarray([bool(rows[i].values.get("named_held")) for i in test])
        held_abstain[test] = (held_conf[test] < t) & ~named
    final = LogisticModel(used, x, y, l2)
    threshold = threshold_for(confidences(np.arange(len(y)), final), y == 1, budget)
    groups: dict[tuple, list[int]] = {}
    for i, r in enumerate(rows):
        groups.setdefault((r.index, r.set, int(r.answerable)), []).append(i)
    abstained = {
        f"{index}/{name}/{'answerable' if label else 'other'}": {"n": len(idx), "abstained": round(float(held_abstain[idx].mean()), 4)}
        for (index, name, label), idx in sorted(groups.items())
    }  # fmt: skip
    cv = {"folds": folds, "auc": round(auc(held_conf, y), 4), "abstained": abstained}
    spec = final.spec(threshold, {"fitted_on": f"{int(y.sum())} answerable + {int((1 - y).sum())} other questions",
                                  "max_answerable": budget, "cv": cv})  # fmt: skip
    return spec, cv


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)
