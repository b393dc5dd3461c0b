"""Dutch legal language: the words of questions and of laws that the ranking reads as such.

Four parts, all rules about Dutch, each measured by cross-validation (``wetqa fit ranking``):

- **Question frame words** (:data:`QUESTION_FRAMES`): the one list of words that frame a question
  ("Wanneer ...", "Onder welke voorwaarden ...", "Hoe lang ...") but carry no content of their own; the
  confidence, the announcing clause, the law names and the extractive answer all read it.
- **Law names** (:class:`LawNames`, :class:`TitleCover`): The laws a question names: by title, by the names other regulations give them, by abbreviation.
- **The legal words of everyday words** (:func:`expand`): Everyday Dutch asked in the words of the law: the legal words a question's everyday words stand for.
- **The announcing clause** (:func:`lead_overlap`): Article structure as a ranking signal: does the clause that announces the article's list match the question.

A person writes "volgens de Awb", "mijn AOW", "art. 7:610 BW", "het Wetboek van Strafrecht". What an
index holds names its laws three ways, all from the corpus itself: each law's short title (its
``<citeertitel>`` or "aangehaald als" clause), the names other regulations refer to it by (the corpus
build keeps them: the Wetboek van Strafrecht, a "Wet van 3 maart 1881", is referred to as such
thousands of times), and abbreviations made from those titles the way Dutch abbreviates its laws (the
initials of the title's words and of the parts of a compound ending in -wet or -wetboek: Algemene wet
bestuursrecht -> Awb, Algemene Ouderdomswet -> AOW, Werkloosheidswet -> WW). Abbreviations that cannot be
made that way (Sr, Sv, Zvw, Wsf...) are listed in :data:`CONVENTIONAL`: lawyers' shorthand, not learned
from the questions wetqa is measured on.

People ask "mag mijn baas mij ontslaan", "hoe lang krijg ik WW", "vanaf welke leeftijd mag ik alcohol
kopen"; statutes say "werkgever", "opzegging", "duur", "alcoholhoudende drank". ``rules/everyday.tsv`` (beside
this module) lists such pairs, written from how Dutch legislation is drafted across every area of law;
:func:`expand` gives the legal words of a question's everyday phrases, which the ranking searches
beside the question's own words (a second BM25 query, and a second question vector for the dense
model). A question in legal Dutch already (the benchmark's) finds little to expand.

Dutch laws state conditions and grounds as a list announced by a clause ending in a colon: "De
vergunning wordt ingetrokken indien:", "Het bewind eindigt:". A question ("Wanneer wordt de vergunning
ingetrokken?") is usually answered by the article whose announcing clause holds the question's words,
while its neighbours in the same law share the vocabulary but announce something else. On the dev
questions, most first-article misses were the right law and a neighbouring article; adding this signal
to the fused score moved the cross-validated Hit@1 from .745 to .8+ (``bench/cross_validate.py``,
``bench/rerank.py``).
"""

from __future__ import annotations

import bisect
import math
import re
from collections.abc import Callable, Iterable, Sequence
from functools import cache, lru_cache

from .engines.tokenization import DUTCH_STOPWORDS, dutch_analyzer
from .rules import pairs as rule_pairs
from .rules import text as rule_text
from .rules import words as rule_words

# --------------------------------------------------------------------------------- question frame words
# The words that frame a question but carry no content, as people write them (the analyzer's stems of them
# are :func:`frame_terms`). One list for every reader of questions: the confidence counts a question's
# content without them, the announcing clause and the extractive answer match what remains, and the law
# names never read them as a law's name or abbreviation.
QUESTION_FRAMES = frozenset(rule_words("question_frames.tsv"))


@cache
def frame_terms(stemmer: str = "dutch_porter") -> frozenset[str]:
    """The analyzer's terms of the frame words (its stems: "wanneer" is "wanner", "omstandigheden" "omstand")."""
    analyzer = dutch_analyzer(stemmer)
    return frozenset(t for w in QUESTION_FRAMES for t in analyzer.tokens(w))


# ----------------------------------------------------------------------------------------------- law names
# Abbreviations lawyers and the public use that a title's initials do not give.
CONVENTIONAL = dict(rule_pairs("law_abbreviations.tsv"))
# Words that look like a made abbreviation but are ordinary Dutch (or too short to mean a law).
_NOT_ABBREVIATIONS = frozenset(rule_words("not_abbreviations.tsv"))
_STOP_IN_TITLES = frozenset(rule_words("title_stop_words.tsv"))
_LAW_SUFFIXES = ("wetboek", "wet", "besluit", "regeling", "verordening")
_WORD = re.compile(r"[\w'-]+", re.UNICODE)


def _normalise(text: str) -> str:
    return " ".join(_WORD.findall(text.lower()))


@lru_cache(maxsize=65_536)
def _law_suffix(word: str) -> str:
    """The kind of regulation a compound ends in ("ouderdomswet" -> "wet"), or "". Cached: opening the
    whole BWB's index asks it of half a million title words, most of them the same few thousand."""
    if not word.endswith(_LAW_SUFFIXES):
        return ""
    return next((s for s in _LAW_SUFFIXES if word.endswith(s) and len(word) > len(s) + 2), "")


def made_abbreviations(title: str) -> set[str]:
    """The abbreviations a title gives the way Dutch makes them: the initials of its words (the small
    words left out, and kept), with a compound ending in -wet or -wetboek giving its last part's
    initial too (Algemene Ouderdomswet -> aow, Werkloosheidswet -> ww)."""
    words = [w for w in _WORD.findall(title.lower()) if not w.isdigit()]
    if not words:
        return set()
    out = set()
    for keep_small in (False, True):
        letters = []
        for w in words:
            if w in _STOP_IN_TITLES and not keep_small:
                continue
            letters.append(w[0])
            suffix = _law_suffix(w)
            if suffix:
                letters.append(suffix[0])
        if len(letters) >= 2:
            out.add("".join(letters))
    return {a for a in out if 2 <= len(a) <= 7 and a not in _NOT_ABBREVIATIONS}


class LawNames:
    """Which laws of an index a question names (by document id), and whether it names one the index lacks."""

    def __init__(self, laws: Iterable[dict]):
        self.by_name: dict[str, set[str]] = {}  # normalised title or name -> document ids
        self.by_abbreviation: dict[str, set[str]] = {}
        made: dict[str, set[str]] = {}
        for law in laws:
            law_id = law["law_id"]
            names = [law.get("title") or "", *(law.get("names") or [])]
            for name in names:
                key = _normalise(name)
                if len(key) > 6 and key not in _KIND_ONLY:
                    self.by_name.setdefault(key, set()).add(law_id)
                for abbreviation in made_abbreviations(name):
                    made.setdefault(abbreviation, set()).add(law_id)
        titles = list(self.by_name)
        for abbreviation, full in CONVENTIONAL.items():
            ids = set().union(*(self.by_name[t] for t in titles if t.startswith(full)), set())
            if ids:
                self.by_abbreviation[abbreviation] = ids
        # A made abbreviation counts only when it points at one law (several laws share most initials), and
        # only written in capitals (AOW, UWV): among 18,000 laws the initials of some title spell most short
        # words ("baas", "bus").
        self.made_abbreviations: dict[str, set[str]] = {}
        for abbreviation, ids in made.items():
            if len(ids) == 1 and abbreviation not in self.by_abbreviation:
                self.made_abbreviations[abbreviation] = ids
        self._longest = max((len(k.split()) for k in self.by_name), default=0)
        self._names_with: dict[str, set[int]] | None = None  # word -> the names that have it (made when needed)
        self._titles: TitleCover | None = None

    def named(self, question: str) -> set[str]:
        """The document ids of the laws the question names."""
        words = _normalise(question).split()
        found: set[str] = set()
        for n in range(min(self._longest, len(words)), 0, -1):
            for i in range(len(words) - n + 1):
                ids = self.by_name.get(" ".join(words[i : i + n]))
                if ids:
                    found |= ids
        for i, w in enumerate(words):
            for key in (w, " ".join(words[i : i + 2])):
                # "AOW-leeftijd", "WW-uitkering": an abbreviation that begins a compound counts too.
                found |= self.by_abbreviation.get(key, set()) | self.by_abbreviation.get(key.split("-")[0], set())
        for w in _WORD.findall(question):
            head = w.split("-")[0]
            if len(head) >= 2 and head.isupper():
                found |= self.made_abbreviations.get(head.lower(), set())
        return found

    def names_absent(self, question: str) -> bool:
        """Whether the question names a law by a conventional abbreviation, a known title or a law's name it
        spells out (:func:`law_mentions`) that this index does not hold ("volgens het Wetboek van
        Strafrecht" asked of the 272 laws, "de Wet open overheid" asked of the BWB of 2012)."""
        q = _normalise(question)
        words = set(q.split()) | {w.split("-")[0] for w in q.split()}
        absent = [a for a in CONVENTIONAL if a in words and a not in self.by_abbreviation]
        absent += [t for t in KNOWN_TITLES if t in q and not any(k.startswith(t) for k in self.by_name)]
        return bool(absent) or any(not self._holds(m) for m in law_mentions(question))

    def _holds(self, mention: str) -> bool:
        """Whether the mention may be a law held: an abbreviation of one, a name of one with every word of
        the mention in any order ("Wet zorgtoeslag" is the Wet op de zorgtoeslag), or words that cover half
        of a held law's title (:class:`TitleCover`: "de Drankwet", "de Wet zorgtoeslag artikel 2"). When in
        doubt a law is held: a wrong "absent" says the corpus cannot answer what it can."""
        if mention in self.by_abbreviation or mention in self.made_abbreviations:
            return True
        if self._names_with is None:
            self._names_with = {}
            for i, name in enumerate(self.by_name):
                for word in set(re.split(r"[\s-]+", name)):
                    self._names_with.setdefault(word, set()).add(i)
            self._titles = TitleCover(list(self.by_name))
        words = [self._names_with.get(w, set()) for w in set(re.split(r"[\s-]+", mention))]
        if not words or set.intersection(*words):
            return True
        assert self._titles is not None
        return max(self._titles.cover(mention).values(), default=0.0) >= 0.5


# Words of a title that say what kind of regulation it is, not what it is about, and the months of the
# dates that title a law without a short title ("Wet van 3 maart 1881").
_GENERIC_IN_TITLES = frozenset(rule_words("generic_title_words.tsv"))
# One-word titles and names that only say what kind of regulation it is: a question with "besluit" or
# "verdrag" in it names no law (the whole BWB has regulations titled "Besluit", "Regeling", "Verdrag").
_KIND_ONLY = frozenset(rule_words("kind_only_titles.tsv"))
# Words of a question that never name a law's subject: the analyzer's stop words and those that frame it.
_QUESTION_STOP = _STOP_IN_TITLES | _NOT_ABBREVIATIONS | DUTCH_STOPWORDS | QUESTION_FRAMES


_TITLE_WORD = re.compile(r"[^\W\d_]{3,}")
_SKIP_IN_TITLES = _STOP_IN_TITLES | _GENERIC_IN_TITLES


def title_words(title: str) -> list[str]:
    """What a title says its regulation is about: its words less the small ones, numbers and the kind of
    regulation, a compound ending in -wet or -besluit cut to its first part (Paspoortwet -> paspoort)."""
    out: dict[str, None] = {}
    for w in _TITLE_WORD.findall(title.lower()):
        if w in _SKIP_IN_TITLES:
            continue
        w = w[: len(w) - len(_law_suffix(w))]
        # A kingdom act's compound names its subject after "rijks" (Rijksoctrooiwet -> octrooi).
        if w.startswith("rijks") and len(w) > 9:
            w = w[5:]
        out[w] = None
    return list(out)


class TitleCover:
    """How much of each law's title a question's words cover, weighted by how rare each title word is among
    the index's titles: "omzetbelasting" covers the Wet op de omzetbelasting 1968 whole and the
    Uitvoeringsbesluit omzetbelasting 1968 in part. A question word matches a title word it equals or
    begins with ("vennootschapsbelastingplichtig", "paspoortaanvraag"), or that begins with it when it is
    most of that word ("werkloosheid" of the Werkloosheidswet). Graded, unlike :class:`LawNames`, which
    needs the whole title or an abbreviation: people name the subject of a law more often than the law."""

    def __init__(self, titles: Sequence[str]):
        words = [title_words(t) for t in titles]
        df: dict[str, int] = {}
        for ws in words:
            for w in ws:
                df[w] = df.get(w, 0) + 1
        n = len(titles)
        self.idf = {w: math.log((n + 1) / (d + 0.5)) for w, d in df.items()}
        self.total = [sum(self.idf[w] for w in ws) for ws in words]
        self.laws_of: dict[str, list[int]] = {}
        for row, ws in enumerate(words):
            for w in ws:
                self.laws_of.setdefault(w, []).append(row)
        self.vocabulary = sorted(self.idf)

    def _matches(self, q: str) -> set[str]:
        found = {q} if q in self.idf else set()
        found |= {q[:i] for i in range(5, len(q)) if q[:i] in self.idf}  # title words q begins with
        if len(q) >= 5:
            at = bisect.bisect_left(self.vocabulary, q)
            while at < len(self.vocabulary) and self.vocabulary[at].startswith(q):
                w = self.vocabulary[at]
                if len(q) >= 0.75 * len(w):
                    found.add(w)
                at += 1
        return found

    def cover(self, question: str) -> dict[int, float]:
        """Law row -> the share of its title's weight the question's words cover (rows covered at all)."""
        matched: set[str] = set()
        for word in _WORD.findall(question.lower()):
            for q in word.split("-"):
                if len(q) >= 4 and q not in _QUESTION_STOP and not q.isdigit():
                    matched |= self._matches(q)
        mass: dict[int, float] = {}
        for w in matched:
            for row in self.laws_of[w]:
                mass[row] = mass.get(row, 0.0) + self.idf[w]
        return {row: m / self.total[row] for row, m in mass.items() if self.total[row] > 0}


# A law's name spelled out in a question: "Wet" (capital: "de wet" is the law in general) with the small
# words a title begins with and two words of substance that follow one another ("Wet goed
# verhuurderschap", "Wet op de vennootschapsbelasting 1969" is not one: a year is no word); or one word
# ending in -wet or -wetboek, capitalised as a name is ("Omgevingswet"; "de belastingwet" is any tax law).
_SMALL = "op|van|de|het|der|den|inzake|tot|ter|ten"  # as titles begin: Wet op de, Wet van, Wet tot
_SPELLED_TITLE = re.compile(rf"\b(Rijkswet|Wetboek|Wet)(?:\s+(?:{_SMALL}))*\s+([\w-]+)(?:[ \t]+([\w-]+))?")
_COMPOUND_TITLE = re.compile(r"\b([A-Z]\w{2,}(?:wet|wetboek))\b")


def law_mentions(question: str) -> list[str]:
    """The law names a question spells out, normalised (see :data:`_SPELLED_TITLE`)."""
    out = []
    for m in _SPELLED_TITLE.finditer(question):
        words = [m.group(2).lower()]
        second = (m.group(3) or "").lower()
        if second and second not in _QUESTION_STOP and not second.isdigit():
            words.append(second)
        # Two words of substance: "de Wet dient ..." or "de Wet zou ..." is the law in general.
        first = words[0]
        if len(words) == 2 and first not in _QUESTION_STOP:
            out.append(" ".join([m.group(1).lower(), *words]))
    out += [m.group(1).lower() for m in _COMPOUND_TITLE.finditer(question)]
    return list(dict.fromkeys(out))


# Titles of laws people name that a corpus may lack (so that naming one says the corpus cannot answer).
KNOWN_TITLES = rule_words("known_titles.tsv")


# ------------------------------------------------------------------------------- everyday words -> legal
_WORD = re.compile(r"[\w'-]+", re.UNICODE)


@cache
def lexicon() -> tuple[tuple[str, tuple[str, ...]], ...]:
    """(everyday phrase, legal words), longest phrases first."""
    text = rule_text("everyday.tsv")
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


# ---------------------------------------------------------------------------------- the announcing clause
# Only the first paragraphs: a list announced deep in a long article is rarely what it is about.
FIRST_PARAGRAPHS = 6
# A colon this far into a paragraph is not announcing its list.
MAX_LEAD_CHARS = 400


def announcing_clauses(paragraphs: Sequence[str]) -> list[str]:
    """The text before the colon of each of the first paragraphs that announces a list."""
    out = []
    for p in paragraphs[:FIRST_PARAGRAPHS]:
        colon = p.find(":")
        if 0 <= colon < MAX_LEAD_CHARS:
            out.append(p[:colon])
    return out


def question_terms(question: str, tokens: Callable[[str], list[str]], frames: bool = True) -> frozenset[str]:
    """The question's analysed terms without the words that frame a question."""
    skip = frame_terms() if frames else frozenset()
    return frozenset(t for t in tokens(question) if t not in skip)


def lead_overlap(terms: frozenset[str], paragraphs: Sequence[str], tokens: Callable[[str], list[str]]) -> float:
    """The largest share of the question's terms found in one announcing clause of the article (0 without)."""
    if not terms:
        return 0.0
    best = 0
    for clause in announcing_clauses(paragraphs):
        best = max(best, len(terms & set(tokens(clause))))
    return best / len(terms)
