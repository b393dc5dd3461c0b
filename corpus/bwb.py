"""Parse official BWB law XML (``<toestand>`` and the older ``<wetgeving>``) into articles.

Parsing is defensive: the network is never touched, entities are never
expanded, and every problem becomes a :class:`BWBParseError` that names the
file and what is wrong with it, so a corpus build can report it and go on.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from lxml import etree

from .records import Article, Division, DocumentError, Law, ParsedLaw
from .sources import FileVersion, register
from .text import block_lines, inline_text, render_article

# Elements that structure a law above the article; their <kop> gives number and title.
DIVISION_TAGS = frozenset(
    {
        "boek",
        "deel",
        "titeldeel",
        "hoofdstuk",
        "afdeling",
        "paragraaf",
        "sub-paragraaf",
        "divisie",
        "bijlage",
        "circulaire.divisie",
        "verdragtekst",
    }
)
# Article-like units: each becomes one record ("Enig artikel" when a regulation has a single one).
ARTICLE_TAGS = frozenset({"artikel", "enig-artikel"})
# Blocks of text: outside an article they are gathered into a text unit of their division.
TEXT_BLOCKS = frozenset(
    {"al", "lijst", "table", "tussenkop", "al-groep", "noot", "definitielijst", "structuurtekst", "li", "lid"}
)
# Never text of the regulation: metadata, headings read elsewhere, titles, and the closing formulas and
# signatures (the same boilerplate in every regulation: "Lasten en bevelen ...", minister's name).
_SKIP = frozenset(
    {
        "meta-data",
        "kop",
        "intitule",
        "citeertitel",
        "alias-titels",
        "wetsluiting",
        "regeling-sluiting",
        "circulaire-sluiting",
        "bijlage-sluiting",
        "plaatje",
        "illustratie",
    }
)
# The preamble: its considerans says what a regulation is for ("Alzo Wij in overweging genomen hebben, dat
# het wenselijk is regels te stellen omtrent ..."), a unit of its own; who issued it ("Wij Willem ...") is not.
_PREAMBLES = frozenset({"aanhef", "circulaire.aanhef", "preambule"})
_PREAMBLE_SKIP = frozenset({"wij", "wie", "koning"})
_TEXT_CONTAINERS = frozenset({"tekst", "vrije-tekst"})
UNIT_LABELS = {"bijlage": "Bijlage", "circulaire.divisie": "Paragraaf", "verdragtekst": "Tekst"}

# Ids of the BWB: BWBR (regulations), BWBV (treaties), BWBW (a few others); ASCII digits only.
BWB_ID = re.compile(r"BWB[RVW][0-9]{1,8}", re.ASCII)
_FILE_NAME = re.compile(r"(BWB[RVW][0-9]{1,8})(?:_([0-9]{4}-[0-9]{2}-[0-9]{2}))?", re.ASCII)
_DECLARED_ENCODING = re.compile(rb"""^\s*<\?xml[^>]*encoding\s*=\s*["']([A-Za-z0-9._-]+)["']""")
_VERVALLEN = re.compile(r"^\[?\s*vervallen\.?\s*\]?\.?$", re.IGNORECASE)
# "Deze wet kan worden aangehaald als: Wetboek van Strafvordering." (and besluit/regeling/..., "wordt
# aangehaald als", "onder de titel"): the short title of a regulation that has no <citeertitel>.
_CITED_AS = re.compile(
    r"\b(?:kan|kunnen|wordt|worden)\s+(?:worden\s+)?aangehaald\s+"
    r"(?:als|onder\s+(?:de|den)\s+(?:titel|naam)(?:\s+van)?)\s*:?\s*(?P<title>.+)",
    re.IGNORECASE | re.DOTALL,
)
_QUOTES = "\"'„“”‘’«»`"
MAX_SHORT_TITLE = 160
# BES regulations apply only in Caribisch Nederland (Bonaire, Sint Eustatius, Saba).
BES_SUFFIX = "-BES"
_BES_TITLE = re.compile(r"\bBES\b")  # "Wet bescherming persoonsgegevens BES" has soort "wet"
# A reference's words before the regulation's name: "artikel 184, eerste lid, van het Wetboek van Strafrecht".
_REF_PREFIX = re.compile(r"^.*\b(?:van|der|uit|in)\s+(?:het|de|den)\s+(?=[A-Z])|^(?:het|de|den)\s+(?=[A-Z])", re.DOTALL)
# A reference that starts with a part of a regulation ("Artikel 171 van het ...", "Eerste Boek van het ...").
_STRUCTURE_WORD = re.compile(
    r"(?i)^(?:\S+\s+)?(?:artikel|artikelen|hoofdstuk|titel|titels|boek|afdeling|paragraaf|bijlage|lid|onderdeel|deel)\b"
)
_NAMED_KIND = re.compile(r"(?i)(wet|besluit|regeling|verdrag|reglement|code|verordening|circulaire|beschikking)")
MAX_REFERENCES = 400  # names kept per regulation file: enough to learn from, bounded in memory


class BWBParseError(DocumentError):
    """A law file that cannot be turned into articles; the message names file and problem."""

    def __init__(self, file: str | os.PathLike, problem: str):
        super().__init__(str(file), problem)


def _parser() -> etree.XMLParser:
    # resolve_entities=False and load_dtd=False: no XXE, no entity expansion;
    # no_network=True: a DTD or schema URL in the file is never fetched.
    return etree.XMLParser(
        resolve_entities=False,
        load_dtd=False,
        dtd_validation=False,
        no_network=True,
        huge_tree=False,
        remove_comments=True,
        remove_pis=True,
    )


def parse_xml_bytes(data: bytes, name: str) -> etree._Element:
    """Parse law XML safely; raise :class:`BWBParseError` naming ``name`` on any problem."""
    if not data.strip():
        raise BWBParseError(name, "empty file")
    m = _DECLARED_ENCODING.match(data)
    encoding = m.group(1).decode("ascii").lower() if m else "utf-8"
    if encoding in ("utf-8", "utf8"):
        try:
            data.decode("utf-8")
        except UnicodeDecodeError as exc:
            line = data.count(b"\n", 0, exc.start) + 1
            raise BWBParseError(
                name, f"not valid UTF-8: byte 0x{data[exc.start]:02X} at offset {exc.start} (line {line})"
            ) from None
    try:
        root = etree.fromstring(data, _parser())
    except etree.XMLSyntaxError as exc:
        msg = str(exc.msg or exc).strip()
        if "Premature end" in msg or "EndTag" in msg or "end of data" in msg.lower():
            problem = f"truncated or unbalanced XML: {msg}"
        else:
            problem = f"malformed XML: {msg}"
        raise BWBParseError(name, problem) from None
    # Entity declarations, found in the DTD as the parser read it (a text scan can be fooled, e.g. by a
    # "]>" inside a comment): refused, whether or not anything used them. The parser never loads an
    # external DTD or entity and never reaches the network, and libxml2 caps expansion.
    dtd = root.getroottree().docinfo.internalDTD
    if dtd is not None and any(True for _ in dtd.iterentities()):
        raise BWBParseError(
            name,
            "the DOCTYPE declares XML entities (<!ENTITY ...>); refused so that no external entity (XXE) "
            "is read and no entity-expansion bomb runs",
        )
    # An entity reference that survived unexpanded is still a refusal, not silent data loss.
    if any(isinstance(el, etree._Entity) for el in root.iter(etree.Entity)):
        raise BWBParseError(name, "the document uses XML entity references; refused (no entity expansion)")
    return root


def _text(el: etree._Element | None) -> str:
    """An element's text without <meta-data> (the toestand format embeds it everywhere)."""
    return "" if el is None else inline_text(el)


def _kop(el: etree._Element) -> tuple[str, str, str]:
    kop = el.find("kop")
    if kop is None:
        return "", "", ""
    return _text(kop.find("label")), _text(kop.find("nr")), _text(kop.find("titel"))


def short_title_of(clause: str, year_of: str = "") -> str:
    """The short title an "aangehaald als" clause gives, or "" when it gives none that looks like one.

    ``year_of``: the long title, whose year a clause "met vermelding van het jaartal" adds to the title."""
    m = _CITED_AS.search(clause)
    if not m:
        return ""
    text = " ".join(m.group("title").split())
    quoted = re.match(rf"[{_QUOTES}]([^{_QUOTES}]+)[{_QUOTES}]", text)
    # "..., met vermelding van het jaartal ..." and the like follow the title (a comma before them or not).
    title = quoted.group(1) if quoted else re.split(r",?\s+(?:met|onder|gevolgd|waarbij)\s", text, maxsplit=1)[0]
    title = title.strip().rstrip(".;:,").strip().strip(_QUOTES).strip().rstrip(".;:,").strip()
    if not title or len(title) > MAX_SHORT_TITLE or not (title[0].isupper() or title[0].isdigit()):
        return ""
    # "... aangehaald als: Politiewet, met vermelding van het jaartal van het Staatsblad": cited with the year.
    year = re.search(r"\b(1[89][0-9]{2}|20[0-9]{2})\b", year_of)
    if "jaartal" in text and year and not re.search(r"[0-9]{4}$", title):
        title = f"{title} {year.group(1)}"
    return title


def _own_text(el: etree._Element) -> str:
    return " ".join(t for t in el.itertext() if t)


def _cited_as(wetgeving: etree._Element, intitule: str) -> str:
    """The short title named by the regulation's own "aangehaald als" article (the last one that names
    one: an amending article may quote another regulation's clause, and the own one closes the text)."""
    found = ""
    for al in wetgeving.iter("al"):
        text = _own_text(al)
        if "aangehaald" not in text or any(
            a.tag in ("wijziging", "wijzig-artikel", "citaat") for a in al.iterancestors()
        ):
            continue
        found = short_title_of(text, intitule) or found
    return found


def reference_name(text: str) -> str:
    """The regulation's name in a reference's text ("artikel 184 van het Wetboek van Strafrecht" ->
    "Wetboek van Strafrecht"), or "" when the text names no regulation (a bare "artikel 3")."""
    text = " ".join(text.split()).strip(" ,.;:()")
    if not text:
        return ""
    if text[0].islower() or _STRUCTURE_WORD.match(text):
        text = _REF_PREFIX.sub("", text, count=1)
    text = text.strip(" ,.;:()")
    if not text or not text[0].isupper() or len(text) > MAX_SHORT_TITLE or not _NAMED_KIND.search(text):
        return ""
    return text


def _referred(root: etree._Element, own_id: str):
    """(referenced BWB id, the reference element) of every reference to another regulation."""
    for el in root.iter("intref", "extref"):
        target = BWB_ID.search(el.get("bwb-id") or el.get("doc") or "")
        if target is not None and target.group(0) != own_id:
            yield target.group(0), el


def references(root: etree._Element, own_id: str) -> list[tuple[str, str]]:
    """(referenced BWB id, the name it is referred to by) of the references to other regulations: how
    the corpus itself names a regulation that states no short title of its own."""
    out: list[tuple[str, str]] = []
    for target, el in _referred(root, own_id):
        name = reference_name("".join(el.itertext()))
        if name:
            out.append((target, name))
            if len(out) >= MAX_REFERENCES:
                break
    return out


def cited_ids(root: etree._Element, own_id: str) -> dict[str, int]:
    """How often the text refers to each other regulation (every reference, named or not): an
    implementing decree refers to the law it rests on again and again ("artikel 5 van de wet")."""
    out: dict[str, int] = {}
    for target, _ in _referred(root, own_id):
        out[target] = out.get(target, 0) + 1
    return out


def _law_metadata(root: etree._Element, name: str) -> Law:
    fname = _FILE_NAME.search(Path(name).name)
    if root.tag == "toestand":
        source_format = "toestand"
        wetgeving = root.find("wetgeving")
        if wetgeving is None:
            raise BWBParseError(name, "<toestand> has no <wetgeving> element")
        law_id = root.get("bwb-id") or (fname.group(1) if fname else "")
        version = root.get("inwerkingtreding") or (fname.group(2) or "" if fname else "")
    elif root.tag == "wetgeving":
        source_format = "wetgeving"
        wetgeving = root
        law_id = root.get("bwb-id") or _text(root.find(".//bwb-id")) or (fname.group(1) if fname else "")
        version = (fname.group(2) or "" if fname else "") or root.get("inwerkingtredingsdatum") or ""
    else:
        raise BWBParseError(name, f"root element <{root.tag}> is neither <toestand> nor <wetgeving>: not BWB law XML")
    if not BWB_ID.fullmatch(law_id or ""):
        raise BWBParseError(
            name, "no BWB id (a bwb-id attribute, or a file named BWBR0000000[_YYYY-MM-DD]; BWBV and BWBW too)"
        )
    intitule = _text(wetgeving.find("intitule"))
    citeertitels = [t for t in (_text(x) for x in wetgeving.findall("citeertitel")) if t]
    short = citeertitels[0] if citeertitels else _cited_as(wetgeving, intitule)
    title = short or intitule or law_id
    kind = wetgeving.get("soort", "")
    return Law(
        law_id=law_id,
        title=title,
        long_title=intitule or title,
        titled=bool(short),
        kind=kind,
        version_date=version,
        source_format=source_format,
        source_file=Path(name).name,
        jurisdiction="bes" if kind.endswith(BES_SUFFIX) or _BES_TITLE.search(title) else "nl",
    )


def _is_expired(article: etree._Element, label: str, paragraphs: list[str]) -> bool:
    if article.get("status") == "vervallen":
        return True
    if "[vervallen" in label.lower():
        return True
    body = " ".join(paragraphs).strip()
    return bool(_VERVALLEN.match(body)) or not body


class _Units:
    """Collects the units of one regulation: its articles and the text outside them."""

    def __init__(self, law: Law):
        self.law = law
        self.out: list[Article] = []

    def add(
        self,
        label: str,
        number: str,
        title: str,
        path: tuple[Division, ...],
        paragraphs: list[str],
        unit: str,
        expired: bool = False,
        xml_id: str = "",
    ) -> None:
        law = self.law
        self.out.append(
            Article(
                law_id=law.law_id,
                collection=law.collection,
                version_date=law.version_date,
                law=law.title,
                article=label,
                number=number,
                title=title,
                path=list(path),
                paragraphs=paragraphs,
                expired=expired,
                ordinal=len(self.out),
                xml_id=xml_id,
                unit=unit,
                kind=law.kind,
                jurisdiction=law.jurisdiction,
            )
        )

    def article(self, el: etree._Element, path: tuple[Division, ...]) -> None:
        label, nr, titel = _kop(el)
        if el.tag == "enig-artikel":
            label, nr = label or "Enig artikel", nr
        elif not nr:
            # Some articles carry their label only as an attribute ("Artikel 3").
            attr = el.get("label", "")
            label, _, nr = attr.partition(" ") if attr else ("Artikel", "", "")
        label = label or "Artikel"
        paragraphs = render_article(el)
        article_label = f"{label} {nr}".strip()
        expired = _is_expired(el, article_label, paragraphs)
        number = nr or ("enig" if el.tag == "enig-artikel" else "")
        self.add(article_label, number, titel, path, paragraphs, el.tag, expired, el.get("bwb-ng-variabel-deel", ""))

    def text(self, blocks: list[etree._Element], path: tuple[Division, ...], unit: str = "") -> None:
        """Text outside any article (a bijlage, a circulaire's paragraph, a treaty's text, loose text of a
        division): one unit named after its division, cited as such ("Bijlage 2", "Paragraaf 1.5")."""
        paragraphs = [p for p in ("\n".join(block_lines(b)) for b in blocks) if p]
        if not paragraphs:
            return
        where = path[-1] if path else None
        if unit == "aanhef":
            label, number, title = "Aanhef", "aanhef", ""
        elif where is None:
            label, number, title = "Tekst", "tekst", ""
        else:
            name = UNIT_LABELS.get(where.kind) or where.label().split(".")[0].split(" ")[0]
            label = f"{name} {where.number}".strip()
            if where.kind == "verdragtekst":
                label = f"Tekst {where.number}".strip() if where.number else "Tekst"
            number = f"{name.lower()}{('-' + where.number) if where.number else ''}"
            title = where.title
            unit = where.kind if where.kind in UNIT_LABELS else "tekst"
            if not where.number and title:
                label = title if len(title) <= 80 else f"{name} ({title[:60]}...)"
        self.add(label, number, title, path, paragraphs, unit or "tekst")


def _division(el: etree._Element) -> Division:
    label, nr, titel = _kop(el)
    if el.tag == "verdragtekst":
        lang = el.get("{http://www.w3.org/XML/1998/namespace}lang", "")
        nr = nr or (lang if lang and lang != "nl" else "")
    return Division(el.tag, nr, titel)


def _walk(el: etree._Element, path: tuple[Division, ...], units: _Units) -> None:
    loose: list[etree._Element] = []
    for child in el:
        tag = child.tag
        if not isinstance(tag, str) or tag in _SKIP:
            continue
        if tag in ARTICLE_TAGS:
            units.article(child, path)
        elif tag in _PREAMBLES:
            units.text([x for x in child if isinstance(x.tag, str) and x.tag not in _PREAMBLE_SKIP], path, "aanhef")
        elif tag in DIVISION_TAGS:
            _walk(child, path + (_division(child),), units)
        elif tag in TEXT_BLOCKS:
            loose.append(child)
        elif any(True for _ in child.iter(*ARTICLE_TAGS, *DIVISION_TAGS)):
            _walk(child, path, units)  # a container (wettekst, regeling-tekst, circulaire-tekst, tekst ...)
        else:
            loose.extend(_blocks(child))  # a container of text only (a circulaire's <tekst>, a treaty's text)
    units.text(loose, path)


def _blocks(el: etree._Element) -> list[etree._Element]:
    """The blocks of a container of text (each its own paragraph, as a lid is), or the element itself."""
    if el.tag in _TEXT_CONTAINERS and not (el.text or "").strip():
        return [b for c in el if isinstance(c.tag, str) and c.tag not in _SKIP for b in _blocks(c)]
    return [el]


def parse_law_bytes(data: bytes, name: str) -> ParsedLaw:
    root = parse_xml_bytes(data, name)
    law = _law_metadata(root, name)
    wetgeving = root.find("wetgeving") if root.tag == "toestand" else root
    units = _Units(law)
    _walk(wetgeving, (), units)
    if not units.out:
        _title_unit(wetgeving, units)
    return ParsedLaw(
        law=law, articles=units.out, references=references(root, law.law_id), cites=cited_ids(root, law.law_id)
    )


def _title_unit(wetgeving: etree._Element, units: _Units) -> None:
    """A regulation the BWB holds without any text (a treaty known by its titles, a circulaire of headings
    only): one unit of its titles and headings, so that it is found and cited by name, not lost."""
    names = [_text(wetgeving.find("intitule")), *(_text(x) for x in wetgeving.iter("alias-titel"))]
    headings = [" ".join(x for x in _kop(el)[1:] if x) for el in wetgeving.iter(*DIVISION_TAGS)]
    lines = list(dict.fromkeys(t for t in [*names, *headings] if t))
    if lines:
        units.add("Titel", "titel", "", (), lines, "titel")


def parse_law(path: str | os.PathLike) -> ParsedLaw:
    """Parse one BWB XML file. Raises :class:`BWBParseError` (with the file name) on bad input."""
    path = Path(path)
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise BWBParseError(path, f"cannot read: {exc.strerror or exc}") from None
    return parse_law_bytes(data, str(path))


_LINK_UNITS = {"artikel": "artikel", "enig-artikel": "artikel", "bijlage": "bijlage"}


def official_url(law_id: str, article: str, unit: str = "artikel", version_date: str = "") -> str:
    """The unit's text on wetten.overheid.nl, in its juriconnect form (``jci1.3:c:BWBR...&artikel=N``),
    as valid and seen on ``version_date`` when given (``&g=DATE&z=DATE``): the version cited, not today's.
    A unit without a number of its own (a circulaire's paragraph, a preamble) links to its regulation."""
    from urllib.parse import quote

    url = f"https://wetten.overheid.nl/jci1.3:c:{quote(law_id, safe='')}"
    part = _LINK_UNITS.get(unit or "artikel")
    number = article.split(" ", 1)[1] if " " in article else ""
    if part and number and unit != "enig-artikel":
        # Article numbers hold colons, spaces and slashes ("7:4 a"): encoded, so the link is one URL.
        url += f"&{part}={quote(number, safe='')}"
    return url + (f"&g={version_date}&z={version_date}" if version_date else "")


class BWBSource:
    """The Basiswettenbestand: consolidated Dutch regulations as official XML (``BWBR0001854_2024-01-01_0.xml``)."""

    name = "bwb"
    description = "Basiswettenbestand: official XML of Dutch regulations (wetten.overheid.nl)"
    suffixes: tuple[str, ...] = (".xml",)
    id_field = "bwb_id"
    id_example = "BWBR0001854"

    def file_version(self, file_name: str) -> FileVersion | None:
        m = _FILE_VERSION.match(file_name)
        if m is None:
            return None
        return FileVersion(m.group(1), m.group(2) or "", None if m.group(3) is None else int(m.group(3)))

    def parse(self, data: bytes, name: str) -> ParsedLaw:
        return parse_law_bytes(data, name)

    def is_id(self, text: str) -> bool:
        return bool(BWB_ID.fullmatch(text))

    def url(self, law_id: str, article: str, unit: str, version_date: str) -> str:
        return official_url(law_id, article, unit or "artikel", version_date)

    def metadata(self, law_id: str) -> dict[str, str]:
        return {"bwb_id": law_id}


# ``{id}.xml``, ``{id}_{date}.xml`` or ``{id}_{date}_{generation}.xml``: what a file's name says of it.
_FILE_VERSION = re.compile(r"^(BWB[RVW][0-9]{1,8})(?:_([0-9]{4}-[0-9]{2}-[0-9]{2})(?:_([0-9]+))?)?\.xml$", re.ASCII)

register(BWBSource())
