"""The laws a question names: by title, by the names other regulations give them, by abbreviation.

A person writes "volgens de Awb", "mijn AOW", "art. 7:610 BW", "het Wetboek van Strafrecht". What an
index holds names its laws three ways, all from the corpus itself: each law's short title (its
``<citeertitel>`` or "aangehaald als" clause), the names other regulations refer to it by (the corpus
build keeps them: the Wetboek van Strafrecht, a "Wet van 3 maart 1881", is referred to as such
thousands of times), and abbreviations made from those titles the way Dutch abbreviates its laws (the
initials of the title's words and of the parts of a compound ending in -wet or -wetboek: Algemene wet
bestuursrecht -> Awb, Algemene Ouderdomswet -> AOW, Werkloosheidswet -> WW). Abbreviations that cannot be
made that way (Sr, Sv, Zvw, Wsf...) are listed in :data:`CONVENTIONAL`: lawyers' shorthand, not learned
from the questions wetqa is measured on.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

# Abbreviations lawyers and the public use that a title's initials do not give.
CONVENTIONAL = {
    "awb": "algemene wet bestuursrecht",
    "ww": "werkloosheidswet",
    "aow": "algemene ouderdomswet",
    "anw": "algemene nabestaandenwet",
    "akw": "algemene kinderbijslagwet",
    "awgb": "algemene wet gelijke behandeling",
    "sr": "wetboek van strafrecht",
    "wvsr": "wetboek van strafrecht",
    "sv": "wetboek van strafvordering",
    "wvsv": "wetboek van strafvordering",
    "rv": "wetboek van burgerlijke rechtsvordering",
    "bw": "burgerlijk wetboek",
    "k": "wetboek van koophandel",
    "gw": "grondwet",
    "zvw": "zorgverzekeringswet",
    "wsf": "wet studiefinanciering",
    "wvw": "wegenverkeerswet",
    "wlz": "wet langdurige zorg",
    "wmo": "wet maatschappelijke ondersteuning",
    "wft": "wet op het financieel toezicht",
    "wor": "wet op de ondernemingsraden",
    "wib": "wet inkomstenbelasting",
    "wet ib": "wet inkomstenbelasting",
    "ob": "wet op de omzetbelasting",
    "wet ob": "wet op de omzetbelasting",
    "awr": "algemene wet inzake rijksbelastingen",
    "awir": "algemene wet inkomensafhankelijke regelingen",
    "wia": "wet werk en inkomen naar arbeidsvermogen",
    "wajong": "wet arbeidsongeschiktheidsvoorziening jonggehandicapten",
    "vw": "vreemdelingenwet",
    "fw": "faillissementswet",
    "mw": "mededingingswet",
    "arbowet": "arbeidsomstandighedenwet",
    "atw": "arbeidstijdenwet",
    "wazo": "wet arbeid en zorg",
    "wav": "wet arbeid vreemdelingen",
    "wpg": "wet politiegegevens",
    "wwm": "wet wapens en munitie",
    "wpo": "wet op het primair onderwijs",
    "wvo": "wet voortgezet onderwijs",
    "whw": "wet op het hoger onderwijs en wetenschappelijk onderzoek",
    "web": "wet educatie en beroepsonderwijs",
    "wwft": "wet ter voorkoming van witwassen en financieren van terrorisme",
    "wvggz": "wet verplichte geestelijke gezondheidszorg",
    "wzd": "wet zorg en dwang",
    "avg": "uitvoeringswet algemene verordening gegevensbescherming",
    "wob": "wet openbaarheid van bestuur",
    "woo": "wet open overheid",
    "wabo": "wet algemene bepalingen omgevingsrecht",
    "wro": "wet ruimtelijke ordening",
    "wbp": "wet bescherming persoonsgegevens",
    "wgba": "wet gemeentelijke basisadministratie persoonsgegevens",
    "brp": "wet basisregistratie personen",
    "wet brp": "wet basisregistratie personen",
    "awbz": "algemene wet bijzondere ziektekosten",
    "wml": "wet minimumloon en minimumvakantiebijslag",
    "wtp": "wet toekomst pensioenen",
}
# Words that look like a made abbreviation but are ordinary Dutch (or too short to mean a law).
_NOT_ABBREVIATIONS = frozenset(
    "de het een en in op te om of al als dan dat die dit wat wie was wel we ze zo na nu ik je u hem haar mij "
    "ons wij zij er be bij aan van voor met tot uit over door naar ja nee mag wet ook des der ten ter pas "
    "is nog per vo".split()
)
_STOP_IN_TITLES = frozenset("van de het der den op en in inzake tot voor over met bij ter ten aan".split())
_LAW_SUFFIXES = ("wetboek", "wet", "besluit", "regeling", "verordening")
_WORD = re.compile(r"[\w'-]+", re.UNICODE)


def _normalise(text: str) -> str:
    return " ".join(_WORD.findall(text.lower()))


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
            suffix = next((s for s in _LAW_SUFFIXES if w.endswith(s) and len(w) > len(s) + 2), None)
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
                if len(key) > 6:
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
        """Whether the question names a law by a conventional abbreviation or a known title that this index
        does not hold ("volgens het Wetboek van Strafrecht" asked of the 272 laws)."""
        q = _normalise(question)
        words = set(q.split()) | {w.split("-")[0] for w in q.split()}
        absent = [a for a in CONVENTIONAL if a in words and a not in self.by_abbreviation]
        absent += [t for t in KNOWN_TITLES if t in q and not any(k.startswith(t) for k in self.by_name)]
        return bool(absent)


# Titles of laws people name that a corpus may lack (so that naming one says the corpus cannot answer).
KNOWN_TITLES = (
    "wetboek van strafrecht",
    "wetboek van strafvordering",
    "wetboek van burgerlijke rechtsvordering",
    "burgerlijk wetboek boek 7",
    "omgevingswet",
    "wet milieubeheer",
    "wet op de omzetbelasting",
    "wet inkomstenbelasting",
    "wet op de loonbelasting",
    "wet op de vennootschapsbelasting",
    "successiewet",
    "wet langdurige zorg",
    "wet maatschappelijke ondersteuning",
    "pensioenwet",
    "ziektewet",
    "wet op de ondernemingsraden",
    "wet minimumloon",
    "woningwet",
    "politiewet",
    "paspoortwet",
    "rijkswet op het nederlanderschap",
    "telecommunicatiewet",
    "mediawet",
    "wet op het financieel toezicht",
    "wet op de rechterlijke organisatie",
    "wet open overheid",
    "wet toekomst pensioenen",
    "wet basisregistratie personen",
)
