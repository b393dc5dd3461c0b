"""A registry of named parts (generator backends, retrievers, metrics), each registered by its own module.

The modules of the built-in parts are known by name, so looking up one part imports only the module
that registers it; listing all of them imports every built-in module and, for other packages' parts,
the modules named by an entry point group (``wetqa.backends``, ``wetqa.retrievers``, ``wetqa.metrics``).
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping, Sequence
from typing import Generic, TypeVar

T = TypeVar("T")


class Registry(Generic[T]):
    def __init__(self, kind: str, builtin: Mapping[str, str], entry_points: str):
        self.kind = kind  # what an entry is, for messages: "generator backend"
        self.builtin = dict(builtin)  # name -> module that registers it
        self.group = entry_points
        self._entries: dict[str, T] = {}
        self._names: dict[str, str] = {}  # every name an entry answers to -> its own name
        self._all_loaded = False

    def register(self, name: str, entry: T, aliases: tuple[str, ...] = ()) -> T:
        for n in (name, *aliases):
            if n in self._names and self._entries[self._names[n]] is not entry:
                raise ValueError(f"a {self.kind} named {n!r} is already registered")
            self._names[n] = name
        self._entries[name] = entry
        return entry

    def unregister(self, name: str) -> None:
        """Forget an entry and its aliases (a part registered for a while, as by a test)."""
        self._entries.pop(name, None)
        for n in [n for n, own in self._names.items() if own == name]:
            del self._names[n]

    def _load_all(self) -> None:
        if self._all_loaded:
            return
        self._all_loaded = True
        for module in dict.fromkeys(self.builtin.values()):
            importlib.import_module(module)
        from importlib.metadata import entry_points

        for ep in entry_points(group=self.group):
            importlib.import_module(ep.value.split(":", 1)[0])

    def all(self) -> dict[str, T]:
        """Every entry by its own name (aliases left out)."""
        self._load_all()
        return dict(self._entries)

    def get(self, name: str) -> T:
        """The entry of ``name`` (or an alias); KeyError when there is none."""
        if name not in self._names:
            if name in self.builtin:
                importlib.import_module(self.builtin[name])
            else:
                self._load_all()  # another package's entry, or an unknown name
        if name not in self._names:
            raise KeyError(name)
        return self._entries[self._names[name]]


def missing_modules(modules: Sequence[str]) -> list[str]:
    import importlib.util

    return [m for m in modules if importlib.util.find_spec(m) is None]
