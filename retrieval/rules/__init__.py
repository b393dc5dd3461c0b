"""The hand-written rules about Dutch legal language, kept as data: the word lists and law-name tables that
retrieval reads (``retrieval.dutch``, the confidence, the ranking's kinds, the reading of a conversation) and the
everyday-to-legal lexicon, one ``.tsv`` file each beside this module. Lines starting with ``#`` are comments.
Every file's SHA-256 is part of a run's identity (:func:`digests`), so a run notices when a rule changes."""

from __future__ import annotations

import hashlib
from functools import cache
from importlib import resources

FILES = (
    "everyday.tsv",
    "question_frames.tsv",
    "law_abbreviations.tsv",
    "not_abbreviations.tsv",
    "title_stop_words.tsv",
    "generic_title_words.tsv",
    "kind_only_titles.tsv",
    "known_titles.tsv",
    "english_words.tsv",
    "kind_groups.tsv",
    "conversation_words.tsv",
)


def text(name: str) -> str:
    return resources.files(__name__).joinpath(name).read_text(encoding="utf-8")


@cache
def rows(name: str) -> tuple[tuple[str, ...], ...]:
    """The lines of a rules file that are not comments or blank, each split at its tabs."""
    return tuple(
        tuple(part.strip() for part in line.split("\t"))
        for line in text(name).splitlines()
        if line.strip() and not line.startswith("#")
    )


def words(name: str) -> tuple[str, ...]:
    """A one-column rules file, in its order."""
    return tuple(r[0] for r in rows(name))


def pairs(name: str) -> tuple[tuple[str, str], ...]:
    """A two-column rules file, in its order."""
    return tuple((r[0], r[1]) for r in rows(name))


def digests() -> dict[str, str]:
    """Each rules file's SHA-256 (16 hex digits), by name."""
    return {
        name: hashlib.sha256(resources.files(__name__).joinpath(name).read_bytes()).hexdigest()[:16] for name in FILES
    }
