"""Everyday Dutch asked in the words of the law: the legal words a question's everyday words stand for.

People ask "mag mijn baas mij ontslaan", "hoe lang krijg ik WW", "vanaf welke leeftijd mag ik alcohol
kopen"; statutes say "werkgever", "opzegging", "duur", "alcoholhoudende drank". ``everyday.tsv`` (beside
this module) lists such pairs, written from how Dutch legislation is drafted across every area of law;
:func:`expand` gives the legal words of a question's everyday phrases, which the ranking searches
beside the question's own words (a second BM25 query, and a second question vector for the dense
model). A question in legal Dutch already (the benchmark's) finds little to expand.
"""

from __future__ import annotations

import re
from functools import cache
from importlib import resources

_WORD = re.compile(r"[\w'-]+", re.UNICODE)


@cache
def lexicon() -> tuple[tuple[str, tuple[str, ...]], ...]:
    """(everyday phrase, legal words), longest phrases first."""
    text = resources.files("wetqa.retrieval").joinpath("everyday.tsv").read_text(encoding="utf-8")
    pairs = []
    for line in text.splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        phrase, _, words = line.partition("\t")
        if phrase.strip() and words.strip():
            pairs.append((" ".join(_WORD.findall(phrase.lower())), tuple(words.split())))
    return tuple(sorted(pairs, key=lambda p: -len(p[0])))


def expand(question: str) -> list[str]:
    """The legal words for the everyday phrases of a question (each once, in lexicon order; words the
    question holds already are left out)."""
    words = _WORD.findall(question.lower())
    text = f" {' '.join(words)} "
    have = set(words)
    out: list[str] = []
    for phrase, legal in lexicon():
        if f" {phrase} " in text:
            out += [w for w in legal if w not in have and w not in out]
    return out


def expanded_question(question: str) -> str:
    """The question with its legal words after it, for the dense model ("... (werkgever, duur)")."""
    extra = expand(question)
    return f"{question} ({', '.join(extra)})" if extra else question
