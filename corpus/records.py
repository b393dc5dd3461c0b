"""The records that flow out of the corpus builder."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

# The collection of records that name none: every corpus before sources were parts held the BWB.
DEFAULT_COLLECTION = "bwb"

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


class DocumentError(ValueError):
    """A file a source cannot read as a document: names the file and the problem, in one line."""

    def __init__(self, file: str, problem: str):
        self.file, self.problem = str(file), problem
        super().__init__(f"{self.file}: {problem}")


@dataclass(slots=True)
class Law:
    law_id: str  # the document's id in its collection ("BWBR0001854")
    title: str  # citeertitel where there is one, else the intitule
    long_title: str  # the intitule
    kind: str  # the ``soort`` attribute: wet, AMvB, ...
    version_date: str  # YYYY-MM-DD of the consolidated version (toestand)
    source_format: str  # "toestand" or "wetgeving"
    source_file: str = ""
    jurisdiction: str = "nl"  # "bes": a regulation of Caribisch Nederland (Bonaire, Sint Eustatius, Saba)
    titled: bool = False  # the title is a short title the regulation states (citeertitel, "aangehaald als")
    collection: str = DEFAULT_COLLECTION  # the source it comes from (corpus.sources)


@dataclass(slots=True)
class Article:
    law_id: str
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
    collection: str = DEFAULT_COLLECTION

    @property
    def text(self) -> str:
        return "\n".join(self.paragraphs)

    def path_label(self) -> str:
        return " > ".join(d.label() for d in self.path)

    def to_json(self, id_names: Mapping[str, str] | None = None) -> dict:
        """The record as ``articles.jsonl`` holds it; ``id_names``: the collection's own names for the law id,
        written beside it (a BWB record's ``bwb_id``: files read by that name before ``law_id``)."""
        return {
            "law_id": self.law_id,
            **(id_names or {}),
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
            "collection": self.collection,
            "text": self.text,
            "paragraphs": self.paragraphs,
        }


@dataclass(slots=True)
class Chunk:
    id: str  # stable: derived from the law's id, version, article number and part
    doc_id: str  # positional, as in the published pipeline: DOC0001, DOC0002, ...
    law_id: str
    version_date: str
    law: str
    article: str
    part: int  # 1-based part of the article
    text: str  # the chunk's own text, what is shown and cited
    search_text: str = ""  # what retrieval indexes; defaults to ``text``
    expired: bool = False
    path_label: str = ""
    # Of the chunk's law and article (an index's store joins them in; chunks.jsonl leaves them out, but
    # for a collection other than the default).
    kind: str = ""  # the law's soort
    jurisdiction: str = "nl"
    valid_until: str = ""  # the date the next version of the law starts ("": current)
    unit: str = "artikel"
    collection: str = DEFAULT_COLLECTION  # the source of its law (corpus.sources)

    def to_json(self, id_names: Mapping[str, str] | None = None) -> dict:
        """The record as ``chunks.jsonl`` holds it; ``id_names`` as :meth:`Article.to_json` takes them."""
        # Written by hand: dataclasses.asdict deep-copies and was a third of the build time.
        d = {
            "id": self.id,
            "doc_id": self.doc_id,
            "law_id": self.law_id,
            **(id_names or {}),
            "version_date": self.version_date,
            "law": self.law,
            "article": self.article,
            "part": self.part,
            "text": self.text,
            "expired": self.expired,
            "path_label": self.path_label,
        }
        if self.collection != DEFAULT_COLLECTION:  # read alone (load_chunks), a chunk still names its source
            d["collection"] = self.collection
        if self.search_text and self.search_text != self.text:
            d["search_text"] = self.search_text
        return d

    @classmethod
    def from_json(cls, d: dict) -> Chunk:
        known = {f for f in cls.__slots__}  # type: ignore[attr-defined]
        if "law_id" not in d and "bwb_id" in d:  # written before records named their document generically
            d = {**d, "law_id": d["bwb_id"]}
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


# The kinds (soort) of a formal law: what a decree, a regulation or a policy rule rests on.
FORMAL_KINDS = ("wet", "rijkswet", "wet-BES")


@dataclass(slots=True)
class ParsedLaw:
    law: Law
    articles: list[Article] = field(default_factory=list)
    # (referenced BWB id, the name the reference gives it): how this text names other regulations.
    references: list[tuple[str, str]] = field(default_factory=list)
    # Every regulation this text refers to, named or not, and how often: the law a decree rests on.
    cites: dict[str, int] = field(default_factory=dict)
