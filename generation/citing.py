"""The cite stage: an answer as people read it, inline [n] markers, a source list and per-sentence support.

Each answer sentence is attributed to the citation and source sentences that support it best (the share of its
content words a source sentence holds); its marker points there, and the web page highlights those source
sentences. One stage for every reader of an answer: ``wetqa ask --output json`` (``support``), the API
(``sentences``, ``citations``) and the page read the same :class:`Cited` (``Answer.cited``).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from wetqa.corpus.text import dutch_date
from wetqa.retrieval.engines.tokenization import cached_tokens

from ._base import Answer, Citation
from .posthoc import select
from .sentences import split_sentences
from .structured import marked_text

# An answer sentence is marked as supported by a source sentence only when the source holds at least
# this share of the sentence's content words (stemmed, stop words out): an absolute measure, unlike
# BM25 whose scale moves with the few sentences of each answer. Calibrated on the sentence-level
# reference data (../shared/data/references, 142 items): 75.8% of the marks it makes are right (recall
# 57.9%), the best F1 with at least 75% precision. Normalising BM25 by each row's best score, as
# before, marked any sentence that shared a single stem with a source.
SUPPORT_THRESHOLD = 0.3


def _terms(text: str) -> frozenset[str]:
    return frozenset(t for t in cached_tokens(text) if len(t) > 1)


def support_matrix(sentences: list[str], sources: list[str]) -> list[list[float]]:
    """Share of each answer sentence's content words found in each source sentence."""
    source_terms = [_terms(s) for s in sources]
    rows = []
    for sentence in sentences:
        words = _terms(sentence)
        rows.append([len(words & t) / len(words) if words else 0.0 for t in source_terms])
    return rows


# A sentence most of whose word 4-grams stand in one cited text, in order, is quoted from it (the extractive
# generator quotes; a chunk boundary may split a quoted sentence, leaving its words spread over the chunks):
# its marker points at that text even when another shares more of its words.
QUOTE_SHARE = 0.5


def _shingles(text: str, n: int = 4) -> list[tuple[str, ...]]:
    words = text.lower().split()
    return [tuple(words[i : i + n]) for i in range(len(words) - n + 1)]


def quoted_from(sentence: str, held: list[set[tuple[str, ...]]], articles: list[tuple]) -> int | None:
    """The position of the cited text ``sentence`` is quoted from, or None (``held``: each cited text's 4-grams,
    ``articles``: the article each belongs to). The share of its 4-grams is counted over each article's texts
    together (a chunk boundary spreads a quote over two chunks); of the article holding at least QUOTE_SHARE,
    the chunk holding the quote's first 4-gram that any of them holds: where it starts."""
    order = _shingles(sentence)
    grams = set(order)
    if not grams or not held:
        return None
    union: dict[tuple, set] = {}
    for article, h in zip(articles, held):
        union.setdefault(article, set()).update(h)
    best = max(union, key=lambda a: len(grams & union[a]))
    if len(grams & union[best]) < QUOTE_SHARE * len(grams):
        return None
    chunks = [i for i, a in enumerate(articles) if a == best]
    return next((i for g in order for i in chunks if g in held[i]), None)


def _starts_in(sentence: str, sources: list[str]) -> list[int]:
    """The source sentence holding the first of ``sentence``'s 4-grams that any of them holds (as a list)."""
    held = [set(_shingles(s)) for s in sources]
    return next(([i] for g in _shingles(sentence) for i, h in enumerate(held) if g in h), [])


@dataclass(slots=True)
class CitedSource:
    """A citation as the answer's source list numbers it: its [n] and its text's sentences."""

    citation: Citation
    index: int  # the n of the [n] marker
    sentences: list[str]  # the cited text's sentences (SentenceSupport.support indexes them)

    @property
    def text(self) -> str:
        return self.citation.text

    @property
    def law(self) -> str:
        return self.citation.law

    @property
    def law_id(self) -> str:
        return self.citation.law_id

    @property
    def article(self) -> str:
        return self.citation.article

    @property
    def version_date(self) -> str:
        return self.citation.version_date

    @property
    def doc_id(self) -> str:
        return self.citation.doc_id

    @property
    def url(self) -> str:
        return self.citation.url

    def to_json(self) -> dict:
        return {**self.citation.to_json(), "index": self.index, "sentences": self.sentences}


@dataclass(slots=True)
class SentenceSupport:
    text: str  # a sentence of the answer
    citation: int | None  # the citation it rests on, if any
    citations: list[int] = field(default_factory=list)  # every citation of the sentence (structured: several)
    support: list[int] = field(default_factory=list)  # the supporting sentences of that citation
    supported: bool = False
    lead: bool = False  # a line naming the cited article (it introduces the quote; not a claim)

    def to_json(self) -> dict:
        return {"text": self.text, "citation": self.citation, "citations": self.citations, "support": self.support,
                "supported": self.supported, "lead": self.lead}  # fmt: skip


@dataclass(slots=True)
class Cited:
    answer: str  # with inline [n] markers
    references: str  # "Bronnen:\n[1] ..."
    citations: list[CitedSource]
    sentences: list[SentenceSupport]  # each with its citation (n or None) and its supporting source sentences
    related: list[Citation]  # abstained: the closest articles, offered but not cited


def cite(answer: Answer, threshold: float = SUPPORT_THRESHOLD) -> Cited:
    if answer.abstained:
        return Cited(answer=answer.answer, references="", citations=[], sentences=[], related=list(answer.related))
    citations = []
    sources: list[list[str]] = []
    for n, c in enumerate(answer.citations, 1):
        sents = split_sentences(c.text)
        sources.append(sents)
        citations.append(CitedSource(c, n, sents))
    flat = [(n, i, s) for n, sents in enumerate(sources, 1) for i, s in enumerate(sents)]
    if answer.structured:
        out_sentences, text = _structured_sentences(answer, citations, flat, threshold)
    else:
        out_sentences, text = _attributed_sentences(answer, citations, flat, threshold)
    refs = "\n".join(
        f"[{c.index}] {c.law}, {c.article}" + (f" (tekst van {dutch_date(c.version_date)})" if c.version_date else "")
        for c in citations
    )
    if answer.validity_note and refs:
        refs += "\n" + answer.validity_note
    return Cited(
        answer=text,
        references=("Bronnen:\n" + refs) if refs else "",
        citations=citations,
        sentences=out_sentences,
        related=[],
    )


def _support(scores: list[float], flat: list[tuple[int, int, str]], threshold: float, only: int | None = None):
    """(citation n, its supporting source sentences) of the best-supporting sources above the threshold
    and close to the best: the sentences a claim rests on, not all it touches. ``only``: of that citation."""
    if only is not None:
        scores = [x if flat[j][0] == only else 0.0 for j, x in enumerate(scores)]
    best = max(scores, default=0.0)
    chosen = select(scores, max(threshold, 0.8 * best), max_refs=3)
    if not chosen:
        return None, []
    top = flat[max(chosen, key=lambda j: scores[j])][0]
    return top, [flat[j][1] for j in chosen if flat[j][0] == top]


def _attributed_sentences(
    answer: Answer, citations: list[CitedSource], flat, threshold: float
) -> tuple[list[SentenceSupport], str]:
    """A text answer: each sentence marked with the citation whose sentences support it best (if any)."""
    out_sentences = []
    marked = []
    answer_sentences = split_sentences(answer.answer)
    matrix = support_matrix(answer_sentences, [s for _, _, s in flat]) if flat else []
    # Each cited text's 4-grams and article, once for the answer: what a quoted sentence is looked up in.
    held = [set(_shingles(c.text)) for c in citations]
    articles = [(c.law_id, c.article, c.version_date) for c in citations]
    # A line that only names a cited article ("Wet X, Artikel 3:") introduces the quote: not a claim.
    leads = {f"{c.law}, {c.article}:": c.index for c in citations}
    for k, sentence in enumerate(answer_sentences):
        if sentence.strip() in leads:
            n = leads[sentence.strip()]
            out_sentences.append(
                SentenceSupport(text=sentence, citation=n, citations=[n], support=[], supported=True, lead=True)
            )
            marked.append(sentence)
            continue
        best_n, support = _support(matrix[k], flat, threshold) if flat else (None, [])
        quoted = quoted_from(sentence, held, articles) if flat else None
        if quoted is not None and citations[quoted].index != best_n:
            n, within = _support(matrix[k], flat, threshold, only=citations[quoted].index)
            # A quote's part in its chunk may hold too few of its words for the share threshold: it is still
            # quoted from there, and marks the chunk's sentence the quote starts in.
            best_n, support = (
                (n, within)
                if n is not None
                else (citations[quoted].index, _starts_in(sentence, citations[quoted].sentences))
            )
        out_sentences.append(
            SentenceSupport(
                text=sentence,
                citation=best_n,
                citations=[best_n] if best_n else [],
                support=support,
                supported=bool(best_n),
                lead=False,
            )
        )
        marked.append(f"{sentence} [{best_n}]" if best_n else sentence)
    return out_sentences, "\n".join(marked) if marked else answer.answer


def _structured_sentences(
    answer: Answer, citations: list[CitedSource], flat, threshold: float
) -> tuple[list[SentenceSupport], str]:
    """A structured answer: each sentence marked with the sources the model gave it (numbered as the
    citations, in order of first mention); its support, the sentences of its first source it rests on."""
    index = {c.doc_id: c.index for c in citations}
    texts = [s.text for s in answer.sentences]
    matrix = support_matrix(texts, [s for _, _, s in flat]) if flat else []
    out, marked = [], []
    for k, sentence in enumerate(answer.sentences):
        numbers = [index[d] for d in sentence.sources if d in index]
        first = numbers[0] if numbers else None
        support = _support(matrix[k], flat, threshold, only=first)[1] if flat and first else []
        out.append(
            SentenceSupport(
                text=sentence.text,
                citation=first,
                citations=numbers,
                support=support,
                supported=bool(numbers),
                lead=False,
            )
        )
        marked.append(marked_text(sentence.text, numbers))
    return out, " ".join(marked)
