"""The questions people ask, per article: what an index reads beside the article itself.

People name a legal concept by words the article never uses (the everyday name of a leave, a tax, a fine,
an heir's right). Writers who know the law and how people talk about it put that knowledge into the index
as the questions each article answers ("doc2query"; "hypothetical questions" in RAG), and a person's
question is read against those questions as well as against the article (:mod:`.articles.questions_view`).

A question set is JSON lines, one row per article (or per regulation, ``article`` empty: what the whole
regulation is for), keyed by the article text's hash so that a changed article gets new questions and an
unchanged one keeps its own::

    {"law_id": "<its law's id>", "article": "Artikel 5:6", "version_date": "2024-01-01",
     "text_hash": "9f2c...", "writer": "helper-3", "questions": ["Mag mijn baas ...?", ...]}
    {"law_id": "...", "article": "Artikel 1", ..., "skip": "definities"}

``wetqa questions write`` writes such a file with any generator backend; wetqa ships one for the 272 laws
(:data:`SHIPPED`, gzip-compressed package data), whose SHA-256 is part of every run's identity.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import math
import re
import zlib
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from functools import cache
from importlib import resources
from pathlib import Path

from ._base import RetrievalError

SHIPPED = "questions.jsonl.gz"  # package data of wetqa.retrieval
NO_QUESTIONS = "none"  # --questions none
# Why an article has no questions (a writer says which): it states no rule a person could ask about.
SKIP_REASONS = (
    "vervallen",  # repealed or empty
    "definities",  # only a list of definitions
    "wijzigingsbepaling",  # changes another regulation
    "citeertitel",  # how the law is cited
    "inwerkingtreding",  # when it enters into force
    "overgangsrecht",  # only a transition rule with no rule of its own for today
    "technisch",  # only refers on or delegates, with nothing a person could ask
    "aanhef",  # the preamble
    "leeg",
)
MIN_WORDS, MAX_WORDS = 4, 45
# "artikel 5", "lid 2", "7:610", "6.1.3" (not a time, "21:00", nor an amount, "10.000")
_ARTICLE_NUMBER = re.compile(
    r"\b(artikel|art\.|lid)\s*\d|\b\d+:(?!(?:[0-5]\d)\b)\d+[a-z]?\b|\b\d+:\d{3,}\b|\b\d+\.\d+\.\d+", re.IGNORECASE
)
_ENGLISH = re.compile(r"\b(the|what|when|which|does|should|would|could)\b", re.IGNORECASE)


def text_hash(text: str) -> str:
    """The hash an article's questions are keyed by: its text (as the corpus renders it), SHA-256, 16 hex digits."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


def question_problem(question: str) -> str | None:
    """Why a written question is not one the set keeps (None: it is): a Dutch question of 4-45 words that
    names no article number (a person does not know it; a question that names it matches it too easily)."""
    q = " ".join(question.split())
    words = q.split()
    if not q.endswith("?"):
        return "not a question (no question mark)"
    if not MIN_WORDS <= len(words) <= MAX_WORDS:
        return f"{len(words)} words (a question has {MIN_WORDS}-{MAX_WORDS})"
    if _ARTICLE_NUMBER.search(q):
        return "names an article number"
    if _ENGLISH.search(q):
        return "not Dutch"
    return None


def normalised(question: str) -> str:
    """A question as compared for duplicates: its words, lower-cased, without punctuation."""
    return " ".join(re.findall(r"\w+", question.lower()))


@dataclass(frozen=True, slots=True)
class ArticleQuestions:
    """One article's questions (or the reason it has none); ``article`` empty: questions about the whole
    regulation (what it is for)."""

    law_id: str
    article: str
    version_date: str
    text_hash: str
    questions: tuple[str, ...] = ()
    writer: str = ""
    skip: str = ""

    @property
    def key(self) -> tuple[str, str, str]:
        return (self.law_id, " ".join(self.article.split()), self.text_hash)

    def to_json(self) -> dict:
        out: dict[str, object] = {"law_id": self.law_id, "article": self.article, "version_date": self.version_date,
               "text_hash": self.text_hash, "writer": self.writer}  # fmt: skip
        if self.skip:
            out["skip"] = self.skip
        else:
            out["questions"] = list(self.questions)
        return out


def row_from_json(record: dict, where: str) -> ArticleQuestions:
    if not isinstance(record, dict):
        raise RetrievalError(f"{where}: not a JSON object")
    for name in ("law_id", "text_hash"):
        if not isinstance(record.get(name), str) or not record[name]:
            raise RetrievalError(f"{where}: {name}: a non-empty text is required")
    questions = record.get("questions") or []
    if not isinstance(questions, list) or not all(isinstance(q, str) for q in questions):
        raise RetrievalError(f"{where}: questions: a list of texts is required")
    skip = record.get("skip") or ""
    if not isinstance(skip, str):
        raise RetrievalError(f"{where}: skip: a text is required")
    if not questions and not skip:
        raise RetrievalError(f"{where}: neither questions nor a skip reason")
    return ArticleQuestions(
        law_id=record["law_id"],
        article=str(record.get("article") or ""),
        version_date=str(record.get("version_date") or ""),
        text_hash=record["text_hash"],
        questions=tuple(" ".join(q.split()) for q in questions if q.strip()),
        writer=str(record.get("writer") or ""),
        skip=skip,
    )


def _lines(data: bytes, where: str) -> Iterator[tuple[str, dict]]:
    for lineno, raw in enumerate(data.splitlines(), 1):
        if not raw.strip():
            continue
        try:
            yield f"{where}:{lineno}", json.loads(raw.decode("utf-8-sig" if lineno == 1 else "utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise RetrievalError(f"{where}:{lineno}: not a JSON line ({exc})") from None


class QuestionSet:
    """The questions of many articles; a later row of the same article and text replaces an earlier one (a
    resumed or repeated writing run appends)."""

    def __init__(self, rows: Iterable[ArticleQuestions], source: str = ""):
        by_key: dict[tuple[str, str, str], ArticleQuestions] = {}
        for row in rows:
            by_key[row.key] = row
        self.rows = list(by_key.values())
        self.source = source
        # Of what the set says, whatever file it came from (compressed or not, keys in any order).
        self.digest = hashlib.sha256(
            "\n".join(json.dumps(r.to_json(), sort_keys=True, ensure_ascii=False) for r in self.rows).encode()
        ).hexdigest()
        self._by_key = by_key
        self._by_label: dict[tuple[str, str], list[ArticleQuestions]] = {}
        for row in self.rows:
            self._by_label.setdefault(row.key[:2], []).append(row)

    def __len__(self) -> int:
        return sum(len(r.questions) for r in self.rows)

    @classmethod
    def load(cls, path: str | Path) -> QuestionSet:
        """A question set from a JSONL file (``.gz``: gzip-compressed); one line naming the first problem."""
        path = Path(path)
        if not path.is_file():
            raise RetrievalError(f"question set not found: {path}")
        data = path.read_bytes()
        if data[:2] == b"\x1f\x8b":
            try:
                data = gzip.decompress(data)
            except (OSError, EOFError, zlib.error) as exc:  # zlib.error: damage inside the compressed stream
                raise RetrievalError(f"{path}: not a readable gzip file ({exc})") from None
        return cls((row_from_json(rec, where) for where, rec in _lines(data, str(path))), str(path))

    def get(self, law_id: str, article: str, text: str | None = None, hashed: str | None = None):
        """The questions of an article by its text (hash); None when the set has none for that text."""
        h = hashed if hashed is not None else text_hash(text or "")
        return self._by_key.get((law_id, " ".join(article.split()), h))

    def of_label(self, law_id: str, article: str) -> list[ArticleQuestions]:
        """Every row of an article, whatever its text (other versions of it)."""
        return self._by_label.get((law_id, " ".join(article.split())), [])

    def of_laws(self) -> dict[str, list[str]]:
        """The questions about whole regulations (rows without an article), by law id."""
        out: dict[str, list[str]] = {}
        for row in self.rows:
            if not row.article and row.questions:
                out.setdefault(row.law_id, []).extend(row.questions)
        return out

    def write(self, path: str | Path) -> Path:
        """The set as one file (``.gz``: compressed the same way every time, so its hash follows its content)."""
        from wetqa.io import atomic_file

        text = "".join(json.dumps(r.to_json(), ensure_ascii=False) + "\n" for r in self.rows).encode("utf-8")
        path = Path(path)
        if path.suffix == ".gz":
            buffer = io.BytesIO()
            with gzip.GzipFile(fileobj=buffer, mode="wb", mtime=0, compresslevel=9) as gz:
                gz.write(text)
            text = buffer.getvalue()
        with atomic_file(path, "wb", encoding=None) as fh:
            fh.write(text)
        return path


def shipped_path() -> Path | None:
    path = resources.files("wetqa.retrieval").joinpath(SHIPPED)
    return Path(str(path)) if path.is_file() else None


@cache
def shipped() -> QuestionSet | None:
    """The question set wetqa ships (the 272 laws), or None in a build without it."""
    path = shipped_path()
    return QuestionSet.load(path) if path is not None else None


def shipped_digest() -> str | None:
    path = shipped_path()
    return hashlib.sha256(path.read_bytes()).hexdigest()[:16] if path is not None else None


def resolve(name: str | None) -> QuestionSet | None:
    """The set an index reads: ``None`` or "shipped" the shipped one, "none" none, else a file."""
    if name in (None, "", "shipped"):
        return shipped()
    if name == NO_QUESTIONS:
        return None
    return QuestionSet.load(name)


def checked(questions: Sequence[str], seen: set[str] | None = None) -> tuple[list[str], list[str]]:
    """(the questions kept, why each other was dropped): :func:`question_problem`, and duplicates (within
    the list, or of ``seen``, normalised words)."""
    seen = set() if seen is None else seen
    kept, dropped = [], []
    for q in questions:
        q = " ".join(q.split())
        problem = question_problem(q)
        norm = normalised(q)
        if problem is None and norm in seen:
            problem = "a duplicate"
        if problem:
            dropped.append(f"{problem}: {q}")
            continue
        seen.add(norm)
        kept.append(q)
    return kept, dropped


NEAR_COPY = 0.6  # word Jaccard at which a written question counts as a copy of an evaluation question


def _word_set(question: str) -> frozenset[str]:
    return frozenset(re.findall(r"\w+", question.lower()))


def near_copies(
    questions: Sequence[str], others: Sequence[str], threshold: float = NEAR_COPY
) -> dict[int, tuple[int, float]]:
    r"""Which of ``questions`` are near copies of one of ``others``: question index -> (the other's index, their
    word Jaccard), for every pair at ``threshold`` or above (the nearest one kept).

    A question set is checked against the questions a ranking is evaluated on: a written question that is almost an
    evaluation question, on its gold article, answers the evaluation for it (the set is decontaminated, as
    benchmarks' training data are). The words are lower-cased ``\w+`` tokens. Prefix filtering keeps it to few
    pairs: two sets at Jaccard >= t share a word among the ``|A| - ceil(t|A|) + 1`` rarest of either, so only
    those prefixes are indexed and probed, and every pair found is verified in full."""
    from collections import Counter, defaultdict

    other_sets = [_word_set(o) for o in others]
    question_sets = [_word_set(q) for q in questions]
    frequency = Counter(w for words in other_sets for w in words)

    def prefix(words: frozenset[str]) -> list[str]:
        rarest = sorted(words, key=lambda w: (frequency[w], w))
        return rarest[: len(words) - math.ceil(threshold * len(words) - 1e-9) + 1]

    holders: dict[str, list[int]] = defaultdict(list)
    for j, words in enumerate(other_sets):
        for w in prefix(words):
            holders[w].append(j)
    found: dict[int, tuple[int, float]] = {}
    for i, words in enumerate(question_sets):
        if not words:
            continue
        best = (-1, 0.0)
        for j in {j for w in prefix(words) for j in holders.get(w, ())}:
            shared = len(words & other_sets[j])
            jaccard = shared / (len(words) + len(other_sets[j]) - shared)
            if jaccard > best[1] or (jaccard == best[1] and best[0] >= 0 and j < best[0]):
                best = (j, jaccard)
        if best[0] >= 0 and best[1] >= threshold:
            found[i] = best
    return found


def asked_in(items) -> list[str]:
    """Every question a dataset asks: its items' questions and the earlier user turns of its conversations."""
    out: list[str] = []
    for item in items:
        out.append(item.question)
        for m in item.messages or ():
            content = m.get("content") if isinstance(m, dict) else None
            if m.get("role") == "user" and isinstance(content, str) and content != item.question:
                out.append(content)
    return out
