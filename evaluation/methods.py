"""Attribution and claim-support methods, each registered by the module that implements it.

A :class:`Method` is a name, a settings dataclass (its model and so on, :func:`wetqa.settings.setting`
fields: the command's flags are derived from it) and how an instance is made from those settings.
``eval references --method`` chooses among the attribution methods (an ``Attributor``:
``scores(sentence, candidates)``), ``eval claims --method`` among the claim-support methods (a
``SupportScorer``: ``score(claim, evidence)``). Adding one is a class, its settings and
``register(Method(...))`` in one module, with its name in ``BUILTIN`` (or an entry point in
``wetqa.attribution_methods`` / ``wetqa.support_methods``).
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from wetqa.registry import Registry
from wetqa.settings import SettingError, SettingInfo, add_arguments, build, given, settings_of


class MethodError(ValueError):
    """An unknown method, or a setting it does not have: one line naming it."""


@dataclass(frozen=True, slots=True)
class Method:
    name: str
    settings: type  # a frozen dataclass of setting() fields (may have none)
    make: Callable[[Any], Any]  # settings -> the method's object
    description: str = ""


@dataclass(frozen=True, slots=True)
class NoSettings:
    """The settings of a method that has none."""


class Methods:
    """One kind of method (attribution, claim support): its registry, its flags, and making one from them."""

    def __init__(self, kind: str, builtin: Mapping[str, str], entry_points: str):
        self.kind = kind
        self._registry: Registry[Method] = Registry(kind, builtin, entry_points)

    def register(self, method: Method) -> Method:
        return self._registry.register(method.name, method)

    def all(self) -> dict[str, Method]:
        return self._registry.all()

    def get(self, name: str) -> Method:
        try:
            return self._registry.get(name)
        except KeyError:
            raise MethodError(f"unknown {self.kind} {name!r}; choose {', '.join(self.all())}") from None

    def setting_infos(self) -> list[SettingInfo]:
        """Every method's settings, once by name, each flag's help naming the methods it applies to."""
        owners: dict[str, list[str]] = {}
        infos: dict[str, SettingInfo] = {}
        for name, method in self.all().items():
            for info in settings_of(method.settings):
                owners.setdefault(info.name, []).append(name)
                infos.setdefault(info.name, info)
        return [replace(info, help=f"{info.help} [{', '.join(owners[n])}]") for n, info in infos.items()]

    def make(self, name: str, values: Mapping[str, Any] | None = None) -> Any:
        """The method ``name`` made from ``values`` (setting name -> value); a setting it lacks is refused."""
        method = self.get(name)
        own = {info.name for info in settings_of(method.settings)}
        foreign = sorted(set(values or {}) - own)
        if foreign:
            flags = ", ".join("--" + k.replace("_", "-") for k in foreign)
            raise MethodError(f"{flags} does not apply to the {name} {self.kind}")
        try:
            settings = build(method.settings, dict(values or {}), name)
        except SettingError as exc:
            raise MethodError(str(exc)) from None
        return method.make(settings)

    def add_cli_args(self, parser: argparse.ArgumentParser, default: str) -> None:
        parser.add_argument("--method", default=default, choices=tuple(self.all()))
        group = parser.add_argument_group(f"{self.kind} settings")
        add_arguments(group, self.setting_infos(), seen=set(), defaults_in_help=False)  # defaults differ by method

    def given(self, args: argparse.Namespace) -> dict[str, Any]:
        """The method settings given as flags."""
        return given(args, self.setting_infos())

    def from_cli_args(self, args: argparse.Namespace) -> Any:
        return self.make(args.method, self.given(args))


ATTRIBUTION = Methods(
    "attribution method",
    {
        name: "wetqa.evaluation.attribution"
        for name in ("bm25", "embedding", "cross-encoder", "nli", "llm")  # in the order they are listed
    },
    "wetqa.attribution_methods",
)
SUPPORT = Methods(
    "claim support method",
    {name: "wetqa.evaluation.expertqa" for name in ("overlap", "embedding", "cross-encoder", "nli")},
    "wetqa.support_methods",
)
