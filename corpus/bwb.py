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

from .records import Article, Division, Law, ParsedLaw
from .text import inline_text, render_article

# Elements that structure a law above the article; their <kop> gives number and title.
DIVISION_TAGS = frozenset(
    {"boek", "deel", "titeldeel", "hoofdstuk", "afdeling", "paragraaf", "sub-paragraaf", "divisie", "bijlage"}
)
# Subtrees that never hold articles: skipping them keeps the walk cheap.
_NO_ARTICLES = frozenset({"meta-data", "kop", "intitule", "citeertitel", "aanhef", "wetsluiting", "al", "lijst"})

_FILE_NAME = re.compile(r"(BWBR\d{7})_(\d{4}-\d{2}-\d{2})")
_DECLARED_ENCODING = re.compile(rb"""^\s*<\?xml[^>]*encoding\s*=\s*["']([A-Za-z0-9._-]+)["']""")
_VERVALLEN = re.compile(r"^\[?\s*vervallen\.?\s*\]?\.?$", re.IGNORECASE)


class BWBParseError(ValueError):
    """A law file that cannot be turned into articles; the message names file and problem."""

    def __init__(self, file: str | os.PathLike, problem: str):
        self.file = str(file)
        self.problem = problem
        super().__init__(f"{self.file}: {problem}")


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


def _law_metadata(root: etree._Element, name: str) -> Law:
    fname = _FILE_NAME.search(Path(name).name)
    if root.tag == "toestand":
        source_format = "toestand"
        wetgeving = root.find("wetgeving")
        if wetgeving is None:
            raise BWBParseError(name, "<toestand> has no <wetgeving> element")
        bwb_id = root.get("bwb-id") or (fname.group(1) if fname else "")
        version = root.get("inwerkingtreding") or (fname.group(2) if fname else "")
    elif root.tag == "wetgeving":
        source_format = "wetgeving"
        wetgeving = root
        bwb_id = root.get("bwb-id") or _text(root.find(".//bwb-id")) or (fname.group(1) if fname else "")
        version = (fname.group(2) if fname else "") or root.get("inwerkingtredingsdatum") or ""
    else:
        raise BWBParseError(name, f"root element <{root.tag}> is neither <toestand> nor <wetgeving>: not BWB law XML")
    if not re.fullmatch(r"BWBR\d{7}", bwb_id or ""):
        raise BWBParseError(name, "no BWB id (bwb-id attribute or a BWBR0000000_YYYY-MM-DD file name)")
    intitule = _text(wetgeving.find("intitule"))
    citeertitel = _text(wetgeving.find("citeertitel"))
    title = citeertitel or intitule or bwb_id
    return Law(
        bwb_id=bwb_id,
        title=title,
        long_title=intitule or title,
        kind=wetgeving.get("soort", ""),
        version_date=version,
        source_format=source_format,
        source_file=Path(name).name,
    )


def _is_expired(article: etree._Element, label: str, paragraphs: list[str]) -> bool:
    if article.get("status") == "vervallen":
        return True
    if "[vervallen" in label.lower():
        return True
    body = " ".join(paragraphs).strip()
    return bool(_VERVALLEN.match(body)) or not body


def _walk(el: etree._Element, path: tuple[Division, ...], law: Law, out: list[Article]) -> None:
    for child in el:
        tag = child.tag
        if not isinstance(tag, str) or tag in _NO_ARTICLES:
            continue
        if tag == "artikel":
            label, nr, titel = _kop(child)
            if not nr:
                # Some articles carry their label only as an attribute ("Artikel 3").
                attr = child.get("label", "")
                label, _, nr = attr.partition(" ") if attr else ("Artikel", "", "")
            label = label or "Artikel"
            paragraphs = render_article(child)
            article_label = f"{label} {nr}".strip()
            out.append(
                Article(
                    bwb_id=law.bwb_id,
                    version_date=law.version_date,
                    law=law.title,
                    article=article_label,
                    number=nr,
                    title=titel,
                    path=list(path),
                    paragraphs=paragraphs,
                    expired=_is_expired(child, article_label, paragraphs),
                    ordinal=len(out),
                    xml_id=child.get("bwb-ng-variabel-deel", ""),
                )
            )
        elif tag in DIVISION_TAGS:
            label, nr, titel = _kop(child)
            _walk(child, path + (Division(tag, nr, titel),), law, out)
        else:
            _walk(child, path, law, out)


def parse_law_bytes(data: bytes, name: str) -> ParsedLaw:
    root = parse_xml_bytes(data, name)
    law = _law_metadata(root, name)
    wetgeving = root.find("wetgeving") if root.tag == "toestand" else root
    articles: list[Article] = []
    _walk(wetgeving, (), law, articles)
    return ParsedLaw(law=law, articles=articles)


def parse_law(path: str | os.PathLike) -> ParsedLaw:
    """Parse one BWB XML file. Raises :class:`BWBParseError` (with the file name) on bad input."""
    path = Path(path)
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise BWBParseError(path, f"cannot read: {exc.strerror or exc}") from None
    return parse_law_bytes(data, str(path))
