"""Dutch-aware tokenisation for the overlap metrics.

rouge-score's default tokenizer keeps only [a-z0-9], so "één" and "reëel"
fall apart into fragments, and "7:271" into two numbers. This one keeps
letters with diacritics, keeps article numbers whole and stems with the
Snowball Dutch stemmer (the Porter-style one nltk calls "dutch").
"""

from __future__ import annotations

import re
from functools import lru_cache

import Stemmer

_TOKEN = re.compile(r"\d+(?:[.:]\d+)*[a-z]?|[^\W\d_]+(?:-[^\W\d_]+)*", re.UNICODE)
_ASCII_TOKEN = re.compile(r"[a-z0-9]+")


@lru_cache(maxsize=1)
def _stemmer() -> Stemmer.Stemmer:
    return Stemmer.Stemmer("dutch_porter")


def dutch_tokens(text: str, stem: bool = True) -> list[str]:
    words = _TOKEN.findall(text.lower())
    if not stem:
        return words
    return _stemmer().stemWords(words)
