"""The generator backends wetqa knows, each registered by its own module.

A backend module ends with ``register(BackendInfo(...))``: its name, its settings dataclass (every
setting with its flag, TOML key, range and whether it changes the output), the per-request sampling
settings it honours, and what it needs installed. The CLI flags, the TOML keys, the overridable
settings and the run records are all derived from these entries, so a new backend or a new setting
is a change to one file. Other packages can add backends through the ``wetqa.backends`` entry point
group (the entry point names a module that calls :func:`register`).

Backend modules import their heavy libraries (torch, vllm, openai) only when a backend is created,
so loading the registry is cheap.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from wetqa.console import EXTRA_OF, UnavailableError, install_command
from wetqa.registry import Registry, missing_modules
from wetqa.settings import SettingInfo, settings_of

# The built-in backends, in the order they are listed to users, and the modules that register them.
BUILTIN = {
    "extractive": "wetqa.generation.backends.extractive",
    "openai": "wetqa.generation.backends.openai_backend",
    "transformers": "wetqa.generation.backends.transformers_backend",
    "vllm": "wetqa.generation.backends.vllm_backend",
}


@dataclass(frozen=True, slots=True)
class BackendInfo:
    name: str
    settings: type  # a frozen dataclass of settings (wetqa.settings.setting fields)
    create: Callable[[Any], Any]  # settings -> a Backend
    supports: frozenset[str] = frozenset()  # per-request Sampling settings it honours
    requires: tuple[str, ...] = ()  # import names that must be installed (their extra: wetqa.console.EXTRA_OF)
    description: str = ""
    uses_model: bool = True  # needs a model (id or path)
    local_model: bool = False  # the model is loaded here (a path must exist)
    defaults: dict = field(default_factory=dict)

    @property
    def infos(self) -> tuple[SettingInfo, ...]:
        return settings_of(self.settings)

    @property
    def extra(self) -> str | None:
        """The pip extra that provides what it needs (read from ``EXTRA_OF``, where it is declared once)."""
        return next((EXTRA_OF[m] for m in self.requires if m in EXTRA_OF), None)

    def check_available(self) -> None:
        gone = missing_modules(self.requires)
        if gone:
            raise UnavailableError(
                f"the {self.name} generator needs {', '.join(gone)} (not installed): {install_command(gone[0])}"
            )


_REGISTRY: Registry[BackendInfo] = Registry("generator backend", BUILTIN, "wetqa.backends")


def register(info: BackendInfo) -> BackendInfo:
    return _REGISTRY.register(info.name, info)


def backends() -> dict[str, BackendInfo]:
    """Every registered backend by name."""
    return _REGISTRY.all()


def backend(name: str) -> BackendInfo:
    return _REGISTRY.get(name)


def all_settings() -> list[SettingInfo]:
    """Every setting of every backend, once by name (a name shared by backends means the same setting)."""
    seen: dict[str, SettingInfo] = {}
    for info in backends().values():
        for s in info.infos:
            seen.setdefault(s.name, s)
    return list(seen.values())


def output_setting_names() -> tuple[str, ...]:
    """The settings, of any backend, that change what a generator writes (recorded with every run)."""
    names = {s.name for info in backends().values() for s in info.infos if s.output}
    return tuple(sorted(names))
