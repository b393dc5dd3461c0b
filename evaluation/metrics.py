"""The answer metrics, one object each, registered by the module that computes it.

What is measured is kept apart from who computes it (as ir_measures does): a :class:`Metric` says
its name, the keys it writes into an answer's score row (and which of them are averaged), its table
columns, what its score depends on (hashed, so a cached score is reused only while its inputs are
the same), and how it is computed: a ``local`` metric by ``compute``, answer by answer; a ``model``
metric (a judge, an NLI model) by the scorer its ``make_scorer`` makes from its ``settings`` (a
dataclass of :func:`wetqa.settings.setting` fields, from which ``eval generation``'s flags and an
experiment's TOML keys are derived), in batches. Adding a metric is one file that ends with
``register`` and its name in ``BUILTIN``.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from wetqa.registry import Registry

BUILTIN = {
    "rouge": "wetqa.evaluation.rouge",
    "meteor": "wetqa.evaluation.meteor",
    "citations": "wetqa.evaluation.citations",
    "geval": "wetqa.evaluation.geval",
    "nli": "wetqa.evaluation.nli",
}
# What `eval generation` and an experiment score when no metrics are named: the local ones.
DEFAULT_METRICS = ("rouge", "meteor", "citations")

# (answers with their questions, the corpus mapping) -> one score row per answer. A scorer whose model
# may be out of reach (a judge's server) also has ``unavailable() -> str | None``: see Scoring.unavailable.
Scorer = Callable[[Sequence[tuple[dict, Any]], Any], list[dict]]


class MetricError(ValueError):
    """A metric unknown, or asked for without what it needs (a judge, a model): one line naming it."""


@dataclass(frozen=True, slots=True)
class Metric:
    name: str
    scores: tuple[str, ...]  # the numbers it writes, averaged x100 in summaries
    complete: tuple[str, ...]  # present in a row when its score is complete (a failed part is retried)
    prefixes: tuple[str, ...]  # every key it writes starts with one of these (dropped when rescored)
    # (rec, item, corpus, settings) -> what the score depends on besides the answer (hashed)
    depends_on: Callable[[dict, Any, Any, Any], list]
    compute: Callable[[dict, Any, Any], dict] | None = None  # (rec, item, corpus) -> scores, local metrics
    settings: type | None = None  # a frozen dataclass of setting() fields: the model metric's flags and keys
    # (settings, folder for a cache) -> its scorer; checks the settings at once, loads a model when first used
    make_scorer: Callable[[Any, Path | None], Scorer] | None = None
    columns: tuple[tuple[str, str, int], ...] = field(default_factory=tuple)  # (label, key, position)
    notes: Callable[[], dict] | None = None  # what the results record about how it was computed

    @property
    def cost(self) -> str:
        """``local``: computed answer by answer here; ``model``: batched by its scorer."""
        return "local" if self.make_scorer is None else "model"

    def input_hash(self, rec: dict, item, corpus, settings: Any = None) -> str:
        parts: list = [rec.get("answer") or "", rec.get("error") or "", *self.depends_on(rec, item, corpus, settings)]
        return hashlib.sha256(json.dumps(parts, ensure_ascii=False, default=str).encode()).hexdigest()[:16]

    def has(self, row: dict) -> bool:
        """Whether a row holds this metric's complete score; a recorded error is retried on the next run."""
        return all(k in row for k in self.complete)

    def drop(self, row: dict) -> None:
        for key in [k for k in row if k.startswith(self.prefixes)]:
            del row[key]


_REGISTRY: Registry[Metric] = Registry("metric", BUILTIN, "wetqa.metrics")


def register(metric: Metric) -> Metric:
    return _REGISTRY.register(metric.name, metric)


def metrics() -> dict[str, Metric]:
    return _REGISTRY.all()


def metric(name: str) -> Metric:
    try:
        return _REGISTRY.get(name)
    except KeyError:
        raise MetricError(f"unknown metric {name!r}; choose from {', '.join(metrics())}") from None


def score_keys() -> frozenset[str]:
    """Every per-answer number that summaries average."""
    return frozenset(k for m in metrics().values() for k in m.scores)


def table_columns() -> list[tuple[str, str]]:
    """(label, key) of the published tables' columns, in their order."""
    cols = [c for m in metrics().values() for c in m.columns]
    return [(label, key) for label, key, _ in sorted(cols, key=lambda c: c[2])]
