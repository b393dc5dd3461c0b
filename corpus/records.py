"""The records that flow out of the corpus builder."""

from __future__ import annotations

from dataclasses import dataclass, field

# How a division is named where its tag is not its name.
DIVISION_NAMES = {"titeldeel": "Titel", "circulaire.divisie": "Paragraaf", "verdragtekst": "Tekst"}


@dataclass(frozen=True, slots=True)
class Division:
    """One level of an article's place in its law (Boek 1, Titel 14, ...)."""

    kind: str  # boek, deel, titeldeel, hoofdstuk, afdeling, paragraaf, ...
    number: str
    title: str

    def label(self) -> str:
        name = DIVISION_NAMES.get(self.kind) or self.kind.capitalize()
        head = f"{name} {self.number}".strip()
        return f"{head}. {self.title}" if self.title else head


@dataclass(slots=True)
class Law:
    bwb_id: str
    title: str  # citeertitel where there is one, else the intitule
    long_title: str  # the intitule
    kind: str  # the ``soort`` attribute: wet, AMvB, ...
    version_date: str  # YYYY-MM-DD of the consolidated version (toestand)
    source_format: str  # "toestand" or "wetgeving"
    source_file: str = ""
    jurisdiction: str = "nl"  # "bes": a regulation of Caribisch Nederland (Bonaire, Sint Eustatius, Saba)
    titled: bool = False  # the title is a short title the regulation states (citeertitel, "aangehaald als")


@dataclass(slots=True)
class Article:
    bwb_id: str
    version_date: str
    law: str
    article: str  # label as written: "Artikel 266", "Artikel 7.3.12"
    number: str  # "266", "7.3.12", "1:2"
    title: str  # the article heading (kop/titel), often empty
    path: list[Division]
    paragraphs: list[str]  # one rendered block per lid / top-level al, markers kept
    expired: bool
    ordinal: int = 0  # position of the article inside its law, 0-based
    xml_id: str = ""  # bwb-ng-variabel-deel, e.g. "/Boek1/Titeldeel14/Artikel266"
    # What kind of unit: "artikel", "enig-artikel", or text outside articles: "bijlage", "circulaire.divisie"
    # (a circulaire's paragraph), "verdragtekst" (a treaty's text), "aanhef" (the preamble), "tekst".
    unit: str = "artikel"
    kind: str = ""  # the law's soort: wet, AMvB, ministeriele-regeling, verdrag, wet-BES, ...
    jurisdiction: str = "nl"  # "bes" for the regulations of Caribisch Nederland
    valid_until: str = ""  # the date the next version of the law starts ("" while this one is current)

    @property
    def text(self) -> str:
        return "\n".join(self.paragraphs)

    def path_label(self) -> str:
        return " > ".join(d.label() for d in self.path)

    def to_json(self) -> dict:
        return {
            "bwb_id": self.bwb_id,
            "version_date": self.version_date,
            "law": self.law,
            "article": self.article,
            "number": self.number,
            "title": self.title,
            "path": [{"kind": d.kind, "number": d.number, "title": d.title} for d in self.path],
            "path_label": self.path_label(),
            "expired": self.expired,
            "xml_id": self.xml_id,
            "unit": self.unit,
            "kind": self.kind,
            "jurisdiction": self.jurisdiction,
            "valid_until": self.valid_until,
            "text": self.text,
            "paragraphs": self.paragraphs,
        }


@dataclass(slots=True)
class Chunk:
    id: str  # stable: derived from bwb_id, version, article number and part
    doc_id: str  # positional, as in the published pipeline: DOC0001, DOC0002, ...
    bwb_id: str
    version_date: str
    law: str
    article: str
    part: int  # 1-based part of the article
    text: str  # the chunk's own text, what is shown and cited
    search_text: str = ""  # what retrieval indexes; defaults to ``text``
    expired: bool = False
    path_label: str = ""
    # Of the chunk's law and article (an index's store joins them in; chunks.jsonl leaves them out).
    kind: str = ""  # the law's soort
    jurisdiction: str = "nl"
    valid_until: str = ""  # the date the next version of the law starts ("": current)
    unit: str = "artikel"

    def to_json(self) -> dict:
        # Written by hand: dataclasses.asdict deep-copies and was a third of the build time.
        d = {
            "id": self.id,
            "doc_id": self.doc_id,
            "bwb_id": self.bwb_id,
            "version_date": self.version_date,
            "law": self.law,
            "article": self.article,
            "part": self.part,
            "text": self.text,
            "expired": self.expired,
            "path_label": self.path_label,
        }
        if self.search_text and self.search_text != self.text:
            d["search_text"] = self.search_text
        return d

    @classmethod
    def from_json(cls, d: dict) -> Chunk:
        known = {f for f in cls.__slots__}  # type: ignore[attr-defined]
        return cls(**{k: v for k, v in d.items() if k in known})

    @property
    def indexed_text(self) -> str:
        return self.search_text or self.text


@dataclass(slots=True)
class ParseFailure:
    file: str
    problem: str

    def __str__(self) -> str:
        return f"{printable(self.file)}: {self.problem}"


def printable(text: str) -> str:
    """``text`` safe to print on a terminal: control characters (ESC, newline, CR...) shown as escapes."""
    return "".join(ch if ch.isprintable() or ch == " " else ch.encode("unicode_escape").decode("ascii") for ch in text)


@dataclass(slots=True)
class ParsedLaw:
    law: Law
    articles: list[Article] = field(default_factory=list)
    # (referenced BWB id, the name the reference gives it): how this text names other regulations.
    references: list[tuple[str, str]] = field(default_factory=list)
