"""An article's versions in an index, the one valid on a day, and the words that changed between two.

A corpus built from files of several version dates holds each version of an article as its own record
(``version_date``, and ``valid_until``: the next version's date, or open). ``wetqa diff`` and the API's
``GET /v1/articles/{law_id}/{article}/versions`` read them from the index's chunk store.
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass

from wetqa.corpus.records import DEFAULT_COLLECTION, Chunk
from wetqa.corpus.sources import citation_url, document_fields

from .._base import InvalidSetting, Named, RetrievalError
from .store import ChunkStore

_SPACE = re.compile(r"\s+")
# Words and the spaces after them, so that joining the pieces gives the text back.
_PIECE = re.compile(r"\S+\s*")


def in_force(version_date: str, valid_until: str, day: str) -> bool:
    """Whether a text that began on ``version_date`` ("": not known) and ended when the next began on
    ``valid_until`` ("": it is current) was in force on ``day`` (YYYY-MM-DD; ISO dates compare as text)."""
    return (not version_date or version_date <= day) and (not valid_until or day < valid_until)


@dataclass(frozen=True, slots=True)
class ArticleVersion:
    law_id: str
    law: str
    article: str
    version_date: str  # "" when the corpus did not know it
    valid_until: str  # "" while it is the current text
    text: str
    expired: bool = False
    place: str = ""  # where in the law it stands (Boek / Titel / ...): two articles may share a label
    unit: str = "artikel"  # what kind of unit it is (artikel, bijlage, paragraaf, ...): its link says so
    collection: str = DEFAULT_COLLECTION

    def valid_on(self, day: str) -> bool:
        return in_force(self.version_date, self.valid_until, day)

    @property
    def announced(self) -> bool:
        """A version published but not yet in force: it begins after today."""
        from ..scope import today

        return bool(self.version_date) and self.version_date > today()

    def span(self) -> str:
        """When the text is in force, as `wetqa diff` lists it: "2012-10-04 .. 2024-01-01", "2024-01-01 .. now",
        and for one that has not begun "vanaf 2027-01-01 (aangekondigd)" (never "now")."""
        if self.announced:
            return (
                f"vanaf {self.version_date}"
                + (f" tot {self.valid_until}" if self.valid_until else "")
                + " (aangekondigd)"
            )
        return f"{self.version_date or 'undated'} .. {self.valid_until or 'now'}"

    def to_json(self) -> dict:
        return {
            **document_fields(self.collection, self.law_id),
            "law": self.law,
            "article": self.article,
            "version_date": self.version_date or None,
            "valid_until": self.valid_until or None,
            "announced": self.announced,
            "expired": self.expired,
            "text": self.text,
            "url": citation_url(self.collection, self.law_id, self.article, self.unit, self.version_date),
        }


ECHOED = 80  # characters of a name a message repeats back to the user


def echoed(text: str) -> str:
    """A name the user gave, as a message repeats it: at most ECHOED characters (a label may be 100 KB)."""
    return text if len(text) <= ECHOED else text[:ECHOED] + "..."


def article_label(article: str) -> str:
    """ "266" and "artikel  266" name "Artikel 266"; other units ("Bijlage 1") are kept as written."""
    text = _SPACE.sub(" ", article).strip()
    if not text:
        raise RetrievalError("give the article, such as 'Artikel 266'")
    if text[0].isdigit():
        return "Artikel " + text
    head, _, rest = text.partition(" ")
    return (head.capitalize() + (" " + rest if rest else "")) if head.lower() == "artikel" else text


def article_versions(store, law_id: str, article: str) -> list[ArticleVersion]:
    """The versions of one article in a chunk store (oldest first); [] when the index does not hold it."""
    label = article_label(article)
    if isinstance(store, ChunkStore):  # the SQLite chunk store answers from its articles table
        rows = store.article_versions(law_id, label)
    else:  # a plain list of chunks (small indexes): one scan
        rows = _scan(store, law_id, label)
    versions = sorted((ArticleVersion(*row) for row in rows), key=lambda v: v.version_date)
    # An expired article beside a live one of the same label in one version is the article's old place
    # (renumbered or moved, its "vervallen" stub left behind), not another article: the live one is meant.
    live = {v.version_date for v in versions if not v.expired}
    versions = [v for v in versions if not v.expired or v.version_date not in live]
    # A label may name two articles of one version (an "Artikel 1" in each of two chapters that number
    # afresh): their texts are not versions of each other.
    places: dict[str, set[str]] = {}
    for v in versions:
        places.setdefault(v.version_date, set()).add(v.place)
    shared = next((sorted(p) for p in places.values() if len(p) > 1), None)
    if shared:
        where = "; ".join(x or "(top)" for x in shared)
        raise RetrievalError(f"{law_id} {label} names {len(shared)} articles of one version ({where}): not one article")
    return versions


def _scan(chunks, law_id: str, label: str) -> list[tuple]:
    parts: dict[tuple[str, str], list[Chunk]] = {}
    for c in chunks:
        if c.law_id == law_id and c.article.lower() == label.lower():
            parts.setdefault((c.version_date, c.path_label), []).append(c)
    rows = []
    for (day, place), cs in parts.items():
        cs.sort(key=lambda c: c.part)
        first = cs[0]
        text = "\n".join(c.text for c in cs)
        rows.append(
            (
                law_id,
                first.law,
                first.article,
                day,
                first.valid_until,
                text,
                first.expired,
                place,
                first.unit,
                first.collection,
            )
        )
    return rows


def versions_payload(versions: list[ArticleVersion], change: dict) -> dict:
    """An article's versions and the words changed between two, as `wetqa diff --output json` and the API's
    ``GET /v1/articles/{law_id}/{article}/versions`` give them."""
    first = versions[0]
    return {
        "object": "list",
        **document_fields(first.collection, first.law_id),
        "law": first.law,
        "article": first.article,
        "data": [v.to_json() for v in versions],
        **change,
    }


def version_on(versions: list[ArticleVersion], day: str) -> ArticleVersion | None:
    """The version in force on ``day`` (the newest one that began by then when the dates overlap)."""
    valid = [v for v in versions if v.valid_on(day)]
    return valid[-1] if valid else None


# difflib's matching grows with the product of the lengths: an article of 60,000 words took 10 s.
MAX_DIFF_WORDS = 20_000


def word_diff(old: str, new: str) -> list[dict]:
    """The words that stayed, went and came between two texts: ``[{"op": "equal"|"delete"|"insert", "text"}]``
    in reading order (a replacement is its deletion, then its insertion)."""
    a, b = _PIECE.findall(old), _PIECE.findall(new)
    if max(len(a), len(b)) > MAX_DIFF_WORDS:
        raise RetrievalError(f"the texts are too long to compare word by word (over {MAX_DIFF_WORDS:,} words)")
    # Compare words without their trailing space, so a changed line break is no change of wording.
    matcher = difflib.SequenceMatcher(None, [w.strip() for w in a], [w.strip() for w in b], autojunk=False)
    ops: list[dict] = []
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        if tag == "equal":
            ops.append({"op": "equal", "text": "".join(b[j1:j2])})
            continue
        if i2 > i1:
            ops.append({"op": "delete", "text": "".join(a[i1:i2])})
        if j2 > j1:
            ops.append({"op": "insert", "text": "".join(b[j1:j2])})
    return ops


def diff_markup(ops: list[dict]) -> str:
    """The difference as text, the way ``git diff --word-diff`` shows it: [-went-] {+came+}."""
    out = []
    for op in ops:
        text = op["text"]
        body, tail = text.rstrip(), text[len(text.rstrip()) :]
        if op["op"] == "equal":
            out.append(text)
        elif op["op"] == "delete":
            out.append(f"[-{body}-]{tail or ' '}")
        else:
            out.append(f"{{+{body}+}}{tail}")
    return "".join(out).rstrip()


def diff_versions(versions: list[ArticleVersion], since: str | None, until: str | None) -> dict:
    """The versions valid on ``since`` and on ``until`` (default: the oldest and the newest) and the words
    that changed between them; a day on which no version of the article was in force is an error."""
    if not versions:
        raise RetrievalError("no version of that article in this index")

    def pick(day: str | None, default: ArticleVersion, setting: str) -> ArticleVersion:
        if day is None:
            return default
        found = version_on(versions, day)
        if found is None:
            dates = ", ".join(v.version_date or "undated" for v in versions)
            problem = f" {day}: no version of this article was in force then (versions: {dates})"
            raise InvalidSetting(setting, Named(setting), problem)
        return found

    old = pick(since, versions[0], "from")
    new = pick(until, versions[-1], "to")
    ops = word_diff(old.text, new.text)
    return {
        "from": old.version_date or None,
        "to": new.version_date or None,
        "changed": any(op["op"] != "equal" for op in ops),
        "diff": ops,
    }
