"""Render an article's XML into readable text, keeping paragraph numbers and list markers.

One string per block: a ``lid`` (numbered paragraph) with its lists, or a
top-level ``al``/``lijst``/table of an article without ``lid`` elements.
Tables become one line per row with cells separated by `` | ``.
"""

from __future__ import annotations

import re
from itertools import zip_longest

from lxml import etree

_WS = re.compile(r"\s+")
_SKIP = frozenset({"meta-data", "kop", "lidnr", "li.nr", "jcis", "colspec", "plaatje", "illustratie"})


def normalise_space(text: str) -> str:
    return _WS.sub(" ", text).strip()


def inline_text(el: etree._Element) -> str:
    parts: list[str] = []

    def walk(e: etree._Element) -> None:
        if e.text:
            parts.append(e.text)
        for c in e:
            if isinstance(c.tag, str) and c.tag not in _SKIP:
                walk(c)
            if c.tail:
                parts.append(c.tail)

    walk(el)
    return normalise_space("".join(parts))


def _with_marker(marker: str, lines: list[str]) -> list[str]:
    marker = normalise_space(marker)
    if not marker:
        return lines
    if not lines:
        return [marker]
    return [f"{marker} {lines[0]}".strip(), *lines[1:]]


def _row_cells(row: etree._Element) -> list[str]:
    return [inline_text(entry) for entry in row.iter("entry")]


def _table_lines(table: etree._Element) -> list[str]:
    """One line per body row, each cell after its column's header ("Zaak: verzoek; Bedrag: € 85"), so
    that a chunk cut from the middle of a long table still says what each value is. Header rows of
    several lines are joined per column; a table without a header gives its cells separated by `` | ``.
    """
    lines = [t for t in (inline_text(x) for x in table.iter("title")) if t]
    headers: list[str] = []
    for head in table.iter("thead"):
        for row in head.iter("row"):
            cells = _row_cells(row)
            headers = [" ".join(x for x in pair if x) for pair in zip_longest(headers, cells, fillvalue="")]
    body_rows = [r for r in table.iter("row") if not any(a.tag == "thead" for a in r.iterancestors())]
    if headers and not body_rows:  # a header-only table: its cells are the text
        return lines + [" | ".join(h for h in headers if h)]
    for row in body_rows:
        cells = _row_cells(row)
        if not any(cells):
            continue
        if headers:
            named = [f"{h}: {c}" if h else c for h, c in zip_longest(headers, cells, fillvalue="") if c]
            lines.append("; ".join(named))
        else:
            lines.append(" | ".join(cells))
    return lines


_BLOCKS = frozenset({"al", "lijst", "li", "lid", "table", "tussenkop", "al-groep", "noot", "divisie"})


def block_lines(el: etree._Element) -> list[str]:
    """The lines of one block element (recursive for lists inside paragraphs)."""
    tag = el.tag
    if tag == "table":
        return _table_lines(el)
    if tag == "lid":
        nr = el.findtext("lidnr") or ""
        nr = normalise_space(nr)
        marker = nr if not nr or nr.endswith(".") else f"{nr}."
        return _with_marker(marker, _children_lines(el))
    if tag == "li":
        return _with_marker(el.findtext("li.nr") or "", _children_lines(el))
    if tag in ("lijst", "al-groep"):
        return _children_lines(el)
    has_blocks = any(isinstance(c.tag, str) and c.tag in _BLOCKS for c in el)
    if has_blocks:
        return _children_lines(el)
    text = inline_text(el)
    return [text] if text else []


def _children_lines(el: etree._Element) -> list[str]:
    lines: list[str] = []
    loose = normalise_space(el.text or "")
    if loose:
        lines.append(loose)
    for child in el:
        if isinstance(child.tag, str) and child.tag not in _SKIP:
            lines.extend(block_lines(child))
        tail = normalise_space(child.tail or "")
        if tail:
            lines.append(tail)
    return lines


def render_article(article: etree._Element) -> list[str]:
    """Blocks of an ``<artikel>``: one per ``lid`` or top-level block, lines joined by newlines."""
    blocks: list[str] = []
    for child in article:
        if not isinstance(child.tag, str) or child.tag in _SKIP:
            continue
        lines = block_lines(child)
        if lines:
            blocks.append("\n".join(lines))
    return blocks


_MONTHS = "januari februari maart april mei juni juli augustus september oktober november december".split()


def dutch_date(day: str) -> str:
    """``2012-10-04`` -> ``4 oktober 2012`` ("" stays "")."""
    if not day:
        return ""
    year, month, date = day.split("-")
    return f"{int(date)} {_MONTHS[int(month) - 1]} {year}"
