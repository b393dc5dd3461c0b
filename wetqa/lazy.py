"""Package ``__init__`` files that import their modules only when a name is used (PEP 562).

``import wetqa.corpus.records`` runs ``wetqa/corpus/__init__.py`` first; when that file imported
the whole stage, every command paid for lxml, the build pool and tqdm before doing anything. With
``lazy(__name__, {...})`` the package lists its public names and where they live, and a name's
module is imported the first time the name is read.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable


def lazy(package: str, exports: dict[str, str]) -> tuple[Callable[[str], object], Callable[[], list[str]]]:
    """(``__getattr__``, ``__dir__``) for a package whose names live in the modules given (``".build"``)."""

    def __getattr__(name: str) -> object:
        module = exports.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module, package), name)
        importlib.import_module(package).__dict__[name] = value  # the next read is a plain lookup
        return value

    def __dir__() -> list[str]:
        return sorted(exports)

    return __getattr__, __dir__
