"""What an evaluation scores: the metrics, and the settings of its model metrics with the scorers made from them.

Every setting of every registered metric (``Metric.settings``) is a flag of ``eval generation`` and a
key of an experiment's TOML, derived here from the settings dataclasses (as
:class:`~wetqa.generation.spec.PipelineSpec` derives the pipeline's), so a new model metric brings
its flags and keys with it.
"""

from __future__ import annotations

import argparse
import copy
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from wetqa.settings import SettingError, SettingInfo, add_arguments, build, given, settings_of

from .metrics import DEFAULT_METRICS, Metric, MetricError, Scorer, metric, metrics


def setting_infos() -> list[SettingInfo]:
    """Every setting of every metric, once by name (a name two metrics share means the same setting)."""
    seen: dict[str, SettingInfo] = {}
    for m in metrics().values():
        for info in settings_of(m.settings) if m.settings else ():
            seen.setdefault(info.name, info)
    return list(seen.values())


def settings_from(values: Mapping[str, Any], where: str = "") -> dict[str, Any]:
    """Each model metric's settings from one flat mapping of setting names (the flags given, a TOML table)."""
    unknown = sorted(set(values) - {i.name for i in setting_infos()})
    if unknown:
        raise MetricError(f"{where + ': ' if where else ''}unknown metric setting(s) {', '.join(unknown)}")
    out = {}
    for name, m in metrics().items():
        if m.settings is not None:
            own = {i.name for i in settings_of(m.settings)}
            try:
                out[name] = build(m.settings, {k: v for k, v in values.items() if k in own}, where)
            except SettingError as exc:
                raise MetricError(str(exc)) from None
    return out


def add_cli_args(parser: argparse.ArgumentParser) -> None:
    """``--metrics`` and a flag per metric setting (``--judge``, ``--nli-model`` ...)."""
    parser.add_argument(
        "--metrics",
        default=",".join(DEFAULT_METRICS),
        help=f"comma-separated: {','.join(metrics())} (default {','.join(DEFAULT_METRICS)})",
    )
    add_arguments(parser.add_argument_group("metric settings"), setting_infos(), seen=set())


def from_cli_args(args: argparse.Namespace) -> dict[str, Any]:
    """Each model metric's settings from the flags given (flags left out keep the setting's default)."""
    return settings_from(given(args, setting_infos()))


def parse_metrics(text: str) -> tuple[str, ...]:
    names = tuple(dict.fromkeys(m.strip() for m in text.split(",") if m.strip()))
    if not names:
        raise MetricError(f"--metrics names no metric ({text!r}); known: {', '.join(metrics())}")
    for name in names:
        metric(name)  # an unknown name is refused, naming the known ones
    return names


class Scoring:
    """The metrics of an evaluation and the scorers of its model metrics.

    The scorers are made at once, so a missing judge or model path is named before anything is scored;
    each loads its model when an answer first needs it. One ``Scoring`` serves every evaluation of an
    experiment, so a model is loaded once per grid.
    """

    def __init__(
        self,
        names: Sequence[str] = DEFAULT_METRICS,
        settings: Mapping[str, Any] | None = None,
        folder: str | Path | None = None,
    ):
        self.metrics: dict[str, Metric] = {name: metric(name) for name in dict.fromkeys(names)}
        chosen = dict(settings or {})
        self.settings = {n: chosen.get(n) or m.settings() for n, m in self.metrics.items() if m.settings}
        folder = Path(folder) if folder else None
        self.scorers: dict[str, Scorer] = {
            n: m.make_scorer(self.settings.get(n), folder) for n, m in self.metrics.items() if m.make_scorer
        }

    def without(self, names: Sequence[str]) -> Scoring:
        """The same scoring without these metrics (their scorers, made already, are kept unused)."""
        out = copy.copy(self)
        out.metrics = {n: m for n, m in self.metrics.items() if n not in names}
        out.settings = {n: v for n, v in self.settings.items() if n in out.metrics}
        out.scorers = {n: v for n, v in self.scorers.items() if n in out.metrics}
        return out

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(self.metrics)

    def local(self) -> list[Metric]:
        return [m for m in self.metrics.values() if m.make_scorer is None]

    def models(self) -> list[Metric]:
        return [m for m in self.metrics.values() if m.make_scorer is not None]

    def input_hash(self, m: Metric, rec: dict, item, corpus) -> str:
        return m.input_hash(rec, item, corpus, self.settings.get(m.name))

    def unavailable(self) -> list[str]:
        """The models that were never reached (a judge's server that is down), each saying why: a
        scorer tells by an ``unavailable()`` method of its own; one without it always answers."""
        reasons = (getattr(s, "unavailable", lambda: None)() for s in self.scorers.values())
        return [r for r in reasons if r]

    def notes(self) -> dict:
        return {k: v for m in self.metrics.values() if m.notes for k, v in m.notes().items()}

    def to_json(self) -> dict:
        """The metrics and the settings of the model metrics among them, by setting name."""
        values = {i.name: getattr(s, i.name) for s in self.settings.values() for i in settings_of(type(s))}
        return {"metrics": list(self.metrics), **values}
