"""The retrievers an index can be built with, each registered by its own module.

A retriever module ends with ``register(RetrieverInfo(...))``: its name, the class that builds and
loads its index files, its options dataclass (every option with its ``wetqa index`` flag, TOML key
and range), whether it reads the corpus folder, and what it needs installed. ``wetqa index`` flags,
experiment tables and index validation are derived from these entries; adding a retriever is a
change to one file. Modules import their heavy libraries (a JVM, torch) only when an index is
built or opened, so loading the registry is cheap.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import asdict, dataclass, fields
from typing import Any

from wetqa.console import UnavailableError
from wetqa.registry import Registry, missing_modules
from wetqa.settings import SettingError, SettingInfo, build, settings_of

from ._base import RetrievalError

# Built-in retrievers by name and the module that registers each: opening an index imports only its
# retriever's module (Pyserini's or torch's are never touched by an articles index).
BUILTIN = {
    "articles": "wetqa.retrieval.articles.bm25",
    "bm25s": "wetqa.retrieval.engines.bm25s_backend",
    "bm25": "wetqa.retrieval.engines.pyserini_backend",
    "pyserini": "wetqa.retrieval.engines.pyserini_backend",
    "dense": "wetqa.retrieval.engines.dense",
}


@dataclass(frozen=True, slots=True)
class RetrieverInfo:
    name: str
    cls: Any  # a class with build(chunks, out, options, progress[, corpus_dir]) and load(path, meta, chunks)
    options: type  # a frozen dataclass of options (wetqa.settings.setting fields)
    description: str = ""
    needs_corpus: bool = False  # build also reads the corpus folder (articles.jsonl)
    inline: bool = False  # queries are cheap enough (numpy, about a millisecond) for a server's event loop
    extra: str | None = None
    requires: tuple[str, ...] = ()
    aliases: tuple[str, ...] = ()
    # "module:function" of an engine's own stages (the articles engine's), named, not imported, so an index never
    # imports the stages that read it; the function: (spec, index, path, dense model, reader) -> (stages,
    # candidate features, pipeline key) or None. None: the pipeline takes the engine's hits as they come.
    stages: str | None = None

    def stage_list(self) -> Callable | None:
        """The function :attr:`stages` names (imported now), or None."""
        if self.stages is None:
            return None
        module, _, function = self.stages.partition(":")
        return vars(importlib.import_module(module))[function]

    @property
    def infos(self) -> tuple[SettingInfo, ...]:
        return settings_of(self.options)

    def defaults(self) -> dict:
        return asdict(self.options())

    def resolve(self, options: dict | None) -> dict:
        """Options checked against the retriever's options class, defaults filled in (what index.json records)."""
        given = {k: v for k, v in (options or {}).items() if v is not None}
        known = {f.name for f in fields(self.options)}
        unknown = sorted(set(given) - known)
        if unknown:
            raise RetrievalError(f"unknown option(s) for {self.name}: {', '.join(unknown)}")
        try:
            opts = asdict(build(self.options, given, self.name))
        except SettingError as exc:
            raise RetrievalError(str(exc)) from None
        return {k: list(v) if isinstance(v, tuple) else v for k, v in opts.items()}

    def check_available(self) -> None:
        gone = missing_modules(self.requires)
        if gone:
            how = f"pip install 'wetqa[{self.extra}]'" if self.extra else "pip install " + " ".join(gone)
            raise UnavailableError(f"the {self.name} retriever needs {', '.join(gone)} (not installed): {how}")


_REGISTRY: Registry[RetrieverInfo] = Registry("retriever", BUILTIN, "wetqa.retrievers")


def register(info: RetrieverInfo) -> RetrieverInfo:
    return _REGISTRY.register(info.name, info, info.aliases)


def retrievers() -> dict[str, RetrieverInfo]:
    """Every registered retriever by its name (aliases left out)."""
    return _REGISTRY.all()


def retriever(name: str) -> RetrieverInfo:
    try:
        return _REGISTRY.get(name)
    except KeyError:
        raise RetrievalError(f"unknown retriever {name!r}; choose one of {', '.join(retrievers())}") from None


def all_options() -> list[SettingInfo]:
    """Every option of every retriever, once by name (``k1`` means the same for every BM25)."""
    seen: dict[str, SettingInfo] = {}
    for info in retrievers().values():
        for s in info.infos:
            seen.setdefault(s.name, s)
    return list(seen.values())
