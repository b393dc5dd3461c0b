"""Chunking strategies: ``words150`` (the published one) and ``structured``.

``words150`` cuts each article's text into consecutive pieces of at most 150
words and keeps expired articles (as their "Vervallen" text), like the
published pipeline, so chunk counts and positional DOC ids are comparable.
``structured`` packs whole paragraphs (``lid``) up to a word budget, splits
only a paragraph that alone exceeds it, leaves expired articles out by
default, and prefixes the indexed text with "Law, Artikel N" so a question
naming a law or article finds it.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from .records import Article, Chunk

STRATEGIES = ("words150", "structured")
_WORD = re.compile(r"\S+\s*")


@dataclass(frozen=True, slots=True)
class ChunkingOptions:
    strategy: str = "words150"
    max_words: int = 150
    include_expired: bool | None = None  # None: the strategy's default
    lowercase: bool = False  # the published pipeline lower-cased; off so that citations read well

    def __post_init__(self) -> None:
        if self.strategy not in STRATEGIES:
            raise ValueError(f"unknown chunking strategy {self.strategy!r}; choose one of {', '.join(STRATEGIES)}")
        if self.max_words < 1:
            raise ValueError(f"max_words must be >= 1, got {self.max_words}")

    @property
    def keeps_expired(self) -> bool:
        if self.include_expired is not None:
            return self.include_expired
        return self.strategy == "words150"


def split_words(text: str, max_words: int) -> list[str]:
    """Consecutive pieces of at most ``max_words`` words; line breaks inside a piece are kept."""
    tokens = _WORD.findall(text.strip())
    return ["".join(tokens[i : i + max_words]).strip() for i in range(0, len(tokens), max_words)] or []


def word_count(text: str) -> int:
    return len(text.split())


def _article_slug(number: str) -> str:
    slug = re.sub(r"[^0-9A-Za-z.]+", "-", number).strip("-.")
    return slug or "x"


def stable_id(article: Article, part: int, occurrence: int = 1) -> str:
    """An id that does not depend on corpus order: ``BWBR0002656_2024-01-01_art266_1``.

    ``occurrence`` disambiguates the rare law that has two articles with the same number.
    """
    slug = _article_slug(article.number)
    if occurrence > 1:
        slug = f"{slug}~{occurrence}"
    return f"{article.law_id}_{article.version_date}_art{slug}_{part}"


def _pieces(article: Article, opts: ChunkingOptions) -> list[str]:
    if opts.strategy == "words150":
        return split_words(article.text, opts.max_words)
    pieces: list[str] = []
    current: list[str] = []
    size = 0
    for block in article.paragraphs:
        n = word_count(block)
        if n > opts.max_words:
            if current:
                pieces.append("\n".join(current))
                current, size = [], 0
            pieces.extend(split_words(block, opts.max_words))
            continue
        if size + n > opts.max_words and current:
            pieces.append("\n".join(current))
            current, size = [], 0
        current.append(block)
        size += n
    if current:
        pieces.append("\n".join(current))
    return pieces


def chunk_articles(articles: Iterable[Article], opts: ChunkingOptions, start: int = 1) -> Iterator[Chunk]:
    """Chunks of the articles in the order given; positional ids count from ``start``."""
    n = start - 1
    seen: dict[tuple[str, str, str], int] = {}
    for article in articles:
        if article.expired and not opts.keeps_expired:
            continue
        key = (article.law_id, article.version_date, _article_slug(article.number))
        seen[key] = occurrence = seen.get(key, 0) + 1
        pieces = _pieces(article, opts) or (["Vervallen"] if article.expired else [])
        path_label = article.path_label()
        for part, piece in enumerate(pieces, 1):
            n += 1
            text = piece.lower() if opts.lowercase else piece
            search_text = ""
            if opts.strategy == "structured":
                search_text = f"{article.law}, {article.article}"
                if article.title:
                    search_text += f" ({article.title})"
                search_text += f"\n{text}"
            yield Chunk(
                id=stable_id(article, part, occurrence),
                doc_id=f"DOC{n:04d}",
                law_id=article.law_id,
                version_date=article.version_date,
                law=article.law,
                article=article.article,
                part=part,
                text=text,
                search_text=search_text,
                expired=article.expired,
                path_label=path_label,
                collection=article.collection,
            )
