"""A Dutch analyzer that mirrors Lucene's ``DutchAnalyzer`` (Pyserini ``--language nl``).

Lucene: standard tokenizer -> lower case -> Dutch stop words -> stem
overrides -> Snowball's original (Porter-style) Dutch stemmer. PyStemmer's
``dutch_porter`` is that same stemmer, so bm25s and Pyserini see the same terms.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from functools import lru_cache

import Stemmer

# Snowball's Dutch stop list, the one Lucene's DutchAnalyzer uses.
DUTCH_STOPWORDS = frozenset(
    """de en van ik te dat die in een hij het niet zijn is was op aan met als voor had er maar om hem dan zou of
    wat mijn men dit zo door over ze zich bij ook tot je mij uit der daar haar naar heb hoe heeft hebben deze u
    want nog zal me zij nu ge geen omdat iets worden toch al waren veel meer doen toen moet ben zonder kan hun dus
    alles onder ja eens hier wie werd altijd doch wordt wezen kunnen ons zelf tegen na reeds wil kon niets uw
    iemand geweest andere""".split()
)
# Lucene's DutchAnalyzer stem override dictionary.
STEM_OVERRIDES = {"fiets": "fiets", "bromfiets": "bromfiets", "ei": "eier", "kind": "kinder"}

# Words with inner dots or commas between digits stay whole ("7.3.12", "1,5"), like UAX#29.
_TOKEN = re.compile(r"\w+(?:[.,]\w+)*", re.UNICODE)


class DutchAnalyzer:
    def __init__(self, stemmer: str = "dutch_porter", stopwords: Iterable[str] = DUTCH_STOPWORDS):
        self.stemmer_name = stemmer
        try:
            self._stemmer = Stemmer.Stemmer(stemmer) if stemmer else None
        except KeyError:
            raise ValueError(
                f"unknown stemmer {stemmer!r}; PyStemmer has: {', '.join(sorted(Stemmer.algorithms()))}"
            ) from None
        self.stopwords = frozenset(stopwords)

    def tokens(self, text: str) -> list[str]:
        words = [w for w in _TOKEN.findall(text.lower()) if w not in self.stopwords]
        if self._stemmer is None:
            return words
        stem = self._stemmer.stemWord
        return [STEM_OVERRIDES.get(w) or stem(w) for w in words]

    def __call__(self, text: str) -> list[str]:
        return self.tokens(text)

    def config(self) -> dict:
        return {
            "stemmer": self.stemmer_name,
            "stopwords": "snowball-dutch" if self.stopwords == DUTCH_STOPWORDS else len(self.stopwords),
        }


@lru_cache(maxsize=4)
def dutch_analyzer(stemmer: str = "dutch_porter") -> DutchAnalyzer:
    return DutchAnalyzer(stemmer)


@lru_cache(maxsize=1 << 16)
def cached_tokens(text: str, stemmer: str = "dutch_porter") -> tuple[str, ...]:
    """Analyzed tokens of a text, memoised: law text is static and requests quote the same chunks again."""
    return tuple(dutch_analyzer(stemmer).tokens(text))
