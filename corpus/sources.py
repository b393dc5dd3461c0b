"""Where a corpus's documents come from: one :class:`Source` per collection, registered by name.

A source says which files it reads, how a file becomes a law (document) with its articles (units),
what its document ids look like, and how a citation links to the official text. Records name their
collection (``collection``) and their document (``law_id``) generically; what is particular to a
collection (the BWB's ``bwb_id``, juriconnect links) stays in its source. The BWB is the one built-in
source (:mod:`wetqa.corpus.bwb`); another package registers its own with :func:`register` or under the
``wetqa.sources`` entry point group.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from wetqa.registry import Registry

from .records import ParsedLaw

DEFAULT = "bwb"
BUILTIN = {"bwb": "wetqa.corpus.bwb"}


@dataclass(frozen=True, slots=True)
class FileVersion:
    """What a file's name says of its document: its id, the version date ("" when it names none) and the
    generation of that version (None when it names none; a newer generation replaces an older one)."""

    law_id: str
    version_date: str = ""
    generation: int | None = None


@runtime_checkable
class Source(Protocol):
    name: str  # the collection, as records name it: "bwb"
    description: str  # one line: what the collection is (`wetqa doctor` lists the sources)
    suffixes: tuple[str, ...]  # the files it reads from a folder, by name ending: (".xml",)
    id_field: str  # what the collection's own data calls a document id ("bwb_id"): read as ``law_id``
    id_example: str  # an id, for messages: "BWBR0001854"

    def file_version(self, file_name: str) -> FileVersion | None:
        """The id, version date and generation a file's name states; None when it states none."""
        ...

    def parse(self, data: bytes, name: str) -> ParsedLaw:
        """One file's law and articles. Raises :class:`~wetqa.corpus.records.DocumentError` on bad input."""
        ...

    def is_id(self, text: str) -> bool:
        """Whether ``text`` is a document id of this collection."""
        ...

    def url(self, law_id: str, article: str, unit: str, version_date: str) -> str:
        """The official text of one unit, as valid on ``version_date`` when the collection can say so."""
        ...

    def metadata(self, law_id: str) -> dict[str, str]:
        """What the collection's own users call the document, added to each citation the API returns."""
        ...


_REGISTRY: Registry[Source] = Registry("corpus source", BUILTIN, "wetqa.sources")


def register(source: Source) -> Source:
    """Make ``source`` known by its name (a module registers its source when imported)."""
    return _REGISTRY.register(source.name, source)


def unregister(name: str) -> None:
    """Forget the source of ``name`` (registered for a while, as by a test)."""
    _REGISTRY.unregister(name)


class UnknownSource(KeyError):
    def __str__(self) -> str:
        return str(self.args[0])


def get_source(name: str) -> Source:
    """The source of a collection; :class:`UnknownSource` with a one-line message when there is none."""
    try:
        return _REGISTRY.get(name or DEFAULT)
    except KeyError:
        known = ", ".join(sorted(_REGISTRY.all()))
        raise UnknownSource(f"no corpus source {name!r} (known: {known})") from None


def all_sources() -> dict[str, Source]:
    return _REGISTRY.all()


def citation_url(collection: str, law_id: str, article: str, unit: str = "", version_date: str = "") -> str:
    """Where a cited unit's official text is ("" for a collection no longer registered)."""
    try:
        source = get_source(collection)
    except UnknownSource:
        return ""
    return source.url(law_id, article, unit, version_date)


def document_metadata(collection: str, law_id: str) -> dict[str, str]:
    """The collection's own names for a document (``{"bwb_id": ...}`` for the BWB)."""
    try:
        return get_source(collection).metadata(law_id)
    except UnknownSource:
        return {}


def document_fields(collection: str, law_id: str) -> dict[str, str]:
    """How a record names its document in JSON: ``collection``, ``law_id`` and the collection's own names."""
    return {"collection": collection, "law_id": law_id, **document_metadata(collection, law_id)}


def source_of_id(law_id: str) -> Source | None:
    """The registered source whose ids look like ``law_id`` (None when no source claims it)."""
    return next((s for s in all_sources().values() if s.is_id(law_id)), None)


def id_problem(law_id: str) -> str | None:
    """Why ``law_id`` is no document id of any registered collection (None when it is one)."""
    if source_of_id(law_id) is not None:
        return None
    examples = ", ".join(s.id_example for s in all_sources().values())
    return f"{law_id!r} is not a document id (such as {examples})"


def id_fields() -> tuple[str, ...]:
    """Every name a record may give its document id: ``law_id``, then each collection's own."""
    return ("law_id", *dict.fromkeys(s.id_field for s in all_sources().values()))


def law_id_of(record: Mapping) -> str:
    """The document id of a record written by wetqa (``law_id``) or in a collection's own terms (a
    benchmark's gold article names it ``bwb_id``); "" when it names none."""
    for key in id_fields():
        value = record.get(key)
        if isinstance(value, str) and value:
            return value
    return ""
