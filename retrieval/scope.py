"""Which regulations a question is asked of: kinds, laws, jurisdiction and the date of the text.

A :class:`Scope` travels with every search (CLI flags ``--kind``, ``--laws``, ``--jurisdiction``,
``--date``; the API's request fields of the same names). An index keeps, per law version, its kind
(``soort``), whether it is a BES regulation and the dates its text was current (:class:`LawTable`,
arrays beside the impacts); a scope becomes a boolean mask over the law versions, and through each
article's law a mask over the articles, which every ranking path applies (the exhaustive scan and the
pruned MaxScore kernels skip masked articles; their view maxima are those of the articles in scope).

Jurisdiction: the BES regulations (Bonaire, Sint Eustatius, Saba: Caribisch Nederland) apply only
there. The default, ``nl``, is the European Netherlands, except for a question that names the islands,
"BES" or "Caribisch Nederland": that one is asked of the BES regulations too. ``bes`` asks only the BES
regulations, ``all`` every regulation alike.
"""

from __future__ import annotations

import datetime
import json
import re
import threading
from collections.abc import Collection
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Literal, get_args

import numpy as np

from ._base import InvalidSetting, Named, RetrievalError

# The settings a scope is made of, by the names RetrievalSpec's settings (the CLI flags, TOML keys) and
# the API's request fields give them, and the Scope attribute each sets.
SCOPE_SETTINGS = {"kind": "kinds", "laws": "laws", "jurisdiction": "jurisdiction", "date": "date"}
Jurisdiction = Literal["nl", "bes", "all"]
JURISDICTIONS: tuple[str, ...] = get_args(Jurisdiction)
_BES_QUESTION = re.compile(
    r"\b(?:bes|bes-eilanden|bonaire|sint[ -]eustatius|statia|saba|caribisch nederland|caribische deel van nederland)\b",
    re.IGNORECASE,
)
OPEN_END = 99991231
LAW_ARRAYS = ("law_kind", "law_bes", "law_from", "law_until")
LAWS_FILE = "laws.json"


def day_number(day: str) -> int:
    """``2012-10-04`` -> 20121004 (comparable as numbers); "" -> 0."""
    return int(day.replace("-", "")) if day else 0


class BoundedCache:
    """A small cache shared by a server's worker threads: the newest ``size`` values by key, made once
    outside the lock (two threads may both make a missing value; one is kept) and read under it."""

    def __init__(self, size: int):
        self.size = size
        self._values: dict = {}
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._values)

    def get(self, key, make):
        with self._lock:
            if key in self._values:
                return self._values[key]
        value = make()
        with self._lock:
            self._values[key] = value
            while len(self._values) > self.size:
                self._values.pop(next(iter(self._values)), None)
        return value


def scope_key(scope: Scope) -> tuple:
    """What a scope's masks depend on: its kinds, laws, jurisdiction and day (no date: today's, so that a
    long-running server ranks a version from the day it begins)."""
    return (scope.kinds, scope.laws, scope.jurisdiction, scope.date or today())


def today() -> str:
    return datetime.date.today().isoformat()


# An index of this many laws (counted by id) or more holds (nearly) all of Dutch law: its ranking and its
# calibration are its own ("@whole"). Among 18,000 regulations the candidates differ in kind (decrees,
# regulations, BES twins) and "answerable" means "the corpus holds a law about it".
WHOLE_FROM_LAWS = 10_000


def holds_whole_bwb(law_ids: Collection[str]) -> bool:
    """Whether an index of these law ids holds the whole BWB rather than a part of it. Given a set (a law
    table's ``held``) it is counted as it is; a list (one id per version) is made a set first."""
    return len(law_ids if isinstance(law_ids, (set, frozenset)) else set(law_ids)) >= WHOLE_FROM_LAWS


def names_bes(question: str) -> bool:
    """Whether a question is about Caribisch Nederland (Bonaire, Sint Eustatius, Saba, "BES")."""
    return bool(_BES_QUESTION.search(question))


class ScopeError(InvalidSetting):
    """A scope an index cannot answer: a value no regulation of it has, or a scope that holds no article.
    ``setting`` is the one that makes it so (kind, laws, jurisdiction or date; None: none the asker gave,
    such as today's date)."""


@dataclass(frozen=True, slots=True)
class Scope:
    """Which regulations a search ranks. The defaults: every kind and law of the European Netherlands
    (and of Caribisch Nederland for a question about it), in the version valid today."""

    kinds: tuple[str, ...] = ()  # soort values (wet, AMvB, ministeriele-regeling, ...); empty: every kind
    laws: tuple[str, ...] = ()  # document ids (law_id); empty: every law
    jurisdiction: str = "nl"
    date: str | None = None  # YYYY-MM-DD: the text valid on that day; None: today

    def __post_init__(self) -> None:
        if self.jurisdiction not in JURISDICTIONS:
            raise ScopeError(
                "jurisdiction", f"unknown jurisdiction {self.jurisdiction!r}; use one of {', '.join(JURISDICTIONS)}"
            )
        if self.date is not None:
            from wetqa.console import check_day

            try:
                check_day(self.date)
            except ValueError as exc:
                raise ScopeError("date", Named("date"), f": {exc}") from None

    def given(self, **settings: Any) -> Scope:
        """This scope with the settings given over it, by their setting names (``kind``, ``laws``,
        ``jurisdiction``, ``date``: :data:`SCOPE_SETTINGS`); one given as None keeps this scope's."""
        unknown = sorted(set(settings) - set(SCOPE_SETTINGS))
        if unknown:
            raise TypeError(f"no scope setting {', '.join(unknown)}; a scope is made of {', '.join(SCOPE_SETTINGS)}")
        changes: dict[str, Any] = {
            SCOPE_SETTINGS[name]: tuple(value) if isinstance(value, (list, tuple)) else value
            for name, value in settings.items()
            if value is not None
        }
        return replace(self, **changes) if changes else self

    @property
    def is_default(self) -> bool:
        return not self.kinds and not self.laws and self.jurisdiction == "nl" and self.date is None

    def for_question(self, question: str) -> Scope:
        """The scope a question is asked in: ``nl`` widens to ``all`` for a question about the BES islands."""
        if self.jurisdiction == "nl" and names_bes(question):
            return Scope(self.kinds, self.laws, "all", self.date)
        return self

    def to_json(self) -> dict:
        return {
            "kinds": list(self.kinds),
            "laws": list(self.laws),
            "jurisdiction": self.jurisdiction,
            "date": self.date,
        }


DEFAULT_SCOPE = Scope()


class LawTable:
    """The law versions of an index: kind, jurisdiction and validity as arrays, titles in ``laws.json``."""

    def __init__(self, folder: Path, arrays: dict[str, np.ndarray], kinds: list[str], ids: list[str]):
        self.folder = folder
        self.kind, self.bes = arrays["law_kind"], arrays["law_bes"]
        self.valid_from, self.valid_until = arrays["law_from"], arrays["law_until"]
        self.kinds = kinds  # code -> soort
        self.ids = ids  # law version -> its document id
        self.held = frozenset(ids)
        # The law versions a search can return anything of (None: all of them); see ranks_only.
        self.ranked: np.ndarray | None = None
        self._masks = BoundedCache(64)
        self._records: list[dict] | None = None

    def ranks_only(self, law_rows: np.ndarray) -> None:
        """The law version of each thing a search returns (an articles index ranks no expired article): a
        scope holding none of them is empty, said as such rather than answered with nothing."""
        self.ranked = np.bincount(np.asarray(law_rows, dtype=np.int64), minlength=len(self.ids)) > 0

    @classmethod
    def load(cls, folder: Path) -> LawTable | None:
        """The table of an index, or None for an index built before it was kept."""
        meta_path = folder / LAWS_FILE
        if not meta_path.is_file():
            return None
        meta = json.loads(meta_path.read_text(encoding="utf-8"))
        arrays = {name: np.load(folder / f"{name}.npy", mmap_mode="r") for name in LAW_ARRAYS}
        n = len(meta["ids"])
        if any(len(a) != n for a in arrays.values()):
            raise ValueError(f"the law arrays do not match the {n} laws of {LAWS_FILE}")
        return cls(folder, arrays, list(meta["kinds"]), list(meta["ids"]))

    @property
    def records(self) -> list[dict]:
        """Each law version's record (title, names, kind, dates...), read when first needed."""
        if self._records is None:
            self._records = json.loads((self.folder / LAWS_FILE).read_text(encoding="utf-8"))["laws"]
        return self._records

    def check(self, scope: Scope) -> None:
        """One clear error for a scope this index cannot answer (a kind or law it does not hold, a date
        before every version it holds, a scope that holds no article)."""
        self.mask(scope)

    def _check_held(self, scope: Scope) -> None:
        unknown = [k for k in scope.kinds if k not in self.kinds]
        if unknown:
            raise ScopeError(
                "kind",
                Named("kind"),
                f" {','.join(unknown)}: no regulation of that kind in this index; it holds "
                + ", ".join(sorted(self.kinds)),
            )
        missing = [i for i in scope.laws if i not in self.held]
        if missing:
            example = min(self.held, default="")
            raise ScopeError(
                "laws", Named("laws"), f": {', '.join(missing[:5])} not in this index (it holds ids such as {example})"
            )
        if scope.date is not None and len(self.valid_from):
            dated = self.valid_from[self.valid_from > 0]
            if len(dated) and len(dated) == len(self.valid_from) and day_number(scope.date) < int(dated.min()):
                first = str(int(dated.min()))
                raise ScopeError(
                    "date",
                    Named("date"),
                    f" {scope.date} is before every version in this index (the oldest starts "
                    f"{first[:4]}-{first[4:6]}-{first[6:]})",
                )

    def mask(self, scope: Scope) -> np.ndarray | None:
        """Which law versions the scope ranks (None: all of them), cached per scope; a scope the index
        cannot answer is a :class:`ScopeError` naming the setting (:meth:`check`)."""

        def make():
            self._check_held(scope)
            ok = np.ones(len(self.kind), dtype=bool)
            for _, _, keep in self._filters(scope):
                ok &= keep
            if not (ok if self.ranked is None else ok & self.ranked).any():
                raise self._empty(scope)
            return None if ok.all() else ok

        return self._masks.get(scope_key(scope), make)

    def _filters(self, scope: Scope) -> list[tuple[str | None, tuple[str | Named, ...], np.ndarray]]:
        """Each filter of a scope: its setting (None: today's date, which nobody gave), how a message
        names it, and the law versions it keeps."""
        out: list[tuple[str | None, tuple[str | Named, ...], np.ndarray]] = []
        if scope.laws:
            ids = np.asarray(self.ids, dtype=object)
            out.append(("laws", (Named("laws"), f" {','.join(scope.laws)}"), np.isin(ids, scope.laws)))
        if scope.kinds:
            codes = [self.kinds.index(k) for k in scope.kinds]
            out.append(("kind", (Named("kind"), f" {','.join(scope.kinds)}"), np.isin(self.kind, codes)))
        if scope.jurisdiction != "all":
            bes = self.bes == (1 if scope.jurisdiction == "bes" else 0)
            out.append(("jurisdiction", (Named("jurisdiction"), f" {scope.jurisdiction}"), bes))
        # The version valid on the day: started on or before it (undated texts: always) and not ended; an
        # open end is in force on any later day, the last one of the calendar too.
        day = day_number(scope.date or today())
        valid = (self.valid_from <= day) & ((day < self.valid_until) | (self.valid_until == OPEN_END))
        if scope.date:
            out.append(("date", (Named("date"), f" {scope.date}"), valid))
        else:
            out.append((None, (f"today ({today()})",), valid))
        return out

    def _empty(self, scope: Scope) -> ScopeError:
        """The one-line error of a scope that holds no article, naming the first filter that leaves none."""
        ok = np.ones(len(self.kind), dtype=bool) if self.ranked is None else self.ranked.copy()
        before: list[str | Named] = []
        for setting, named, keep in self._filters(scope):
            ok &= keep
            if not ok.any():
                within = (" together with", *before) if before else ()
                empty = ": the scope is empty: no article of this index is in it"
                return ScopeError(setting, *named, empty, *within, "; widen the scope")
            before += [" ", *named]
        return ScopeError(None, "the scope is empty: no article of this index is in it; widen the scope")


def write_law_table(folder: Path, laws: list[dict]) -> None:
    """Write the law arrays and ``laws.json`` of an index (a law's row is its place in ``laws``)."""
    kinds = sorted({law.get("kind") or "" for law in laws})
    np.save(folder / "law_kind.npy", np.asarray([kinds.index(law.get("kind") or "") for law in laws], np.int16))
    np.save(folder / "law_bes.npy", np.asarray([law.get("jurisdiction") == "bes" for law in laws], np.uint8))
    np.save(folder / "law_from.npy", np.asarray([day_number(law["version_date"]) for law in laws], np.int32))
    until = [day_number(law.get("valid_until") or "") or OPEN_END for law in laws]
    np.save(folder / "law_until.npy", np.asarray(until, np.int32))
    meta = {"kinds": kinds, "ids": [law["law_id"] for law in laws], "laws": laws}
    (folder / LAWS_FILE).write_text(json.dumps(meta, ensure_ascii=False) + "\n", encoding="utf-8")


class ChunkScope:
    """The chunks of an index in a scope, for retrievers that rank chunks (bm25s, Pyserini, dense)."""

    def __init__(self, laws: LawTable | None, chunk_law: np.ndarray | None):
        self.laws, self.chunk_law = laws, chunk_law
        self._masks = BoundedCache(16)

    @classmethod
    def load(cls, folder: Path, n_chunks: int) -> ChunkScope:
        laws = LawTable.load(folder)
        path = folder / "chunk_law.npy"
        chunk_law = np.load(path, mmap_mode="r") if path.is_file() else None
        if chunk_law is not None and (len(chunk_law) != n_chunks or laws is None):
            raise ValueError(f"chunk_law.npy holds {len(chunk_law)} laws for {n_chunks} chunks")
        return cls(laws, chunk_law)

    def allowed(self, scope: Scope | None, question: str = "") -> np.ndarray | None:
        """Which chunk rows the scope ranks (None: all of them)."""
        scope = (scope or DEFAULT_SCOPE).for_question(question)
        if self.laws is None or self.chunk_law is None:
            if not scope.is_default and scope.jurisdiction != "all":
                raise RetrievalError(
                    "this index keeps no law table to filter by; rebuild it with `wetqa index --force`"
                )
            return None
        law_mask = self.laws.mask(scope)
        if law_mask is None:
            return None
        chunk_law = self.chunk_law
        return self._masks.get(scope_key(scope), lambda: law_mask[np.asarray(chunk_law)])


def law_table_of(retriever) -> LawTable | None:
    """The law table behind a retriever: an index's own (an articles index's, or the one a chunk retriever
    masks its chunks by), or a pipeline's first index's."""
    return retriever.laws  # declared (retrieval._base.RetrieverBase)


def check_scope(retriever, scope: Scope) -> None:
    """One clear error (RetrievalError) for a scope the retriever's index cannot answer."""
    laws = law_table_of(retriever)
    if laws is not None:
        laws.check(scope)
    elif not scope.is_default:
        raise RetrievalError("this index keeps no law table to filter by; rebuild it with `wetqa index --force`")
