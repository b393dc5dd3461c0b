"""The answer metrics, one object each, registered by the module that computes it.

What is measured is kept apart from who computes it (as ir_measures does): a :class:`Metric` says
its name, the keys it writes into an answer's score row (and which of them are averaged), its table
columns, what its score depends on (hashed, so a cached score is reused only while its inputs are
the same), and its cost: ``local`` metrics are computed per answer here, ``model`` metrics (a judge,
an NLI model) are batched by their scorer. Adding a metric is one file that ends with ``register``.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from wetqa.registry import Registry

BUILTIN = {
    "rouge": "wetqa.evaluation.rouge",
    "meteor": "wetqa.evaluation.meteor",
    "citations": "wetqa.evaluation.citations",
    "geval": "wetqa.evaluation.geval",
    "nli": "wetqa.evaluation.nli",
}


@dataclass(frozen=True, slots=True)
class Metric:
    name: str
    scores: tuple[str, ...]  # the numbers it writes, averaged x100 in summaries
    complete: tuple[str, ...]  # present in a row when its score is complete (a failed part is retried)
    prefixes: tuple[str, ...]  # every key it writes starts with one of these (dropped when rescored)
    # (rec, item, corpus, model) -> what the score depends on besides the answer (hashed)
    depends_on: Callable[[dict, Any, Any, str | None], list]
    cost: str = "local"  # local: computed per answer by ``compute``; model: batched by a scorer given
    compute: Callable[[dict, Any, Any], dict] | None = None  # (rec, item, corpus) -> scores, local metrics
    columns: tuple[tuple[str, str, int], ...] = field(default_factory=tuple)  # (label, key, position)
    needs: str = ""  # for a model metric: what its scorer needs, as the user gives it

    def input_hash(self, rec: dict, item, corpus, model: str | None = None) -> str:
        parts: list = [rec.get("answer") or "", rec.get("error") or "", *self.depends_on(rec, item, corpus, model)]
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
    return _REGISTRY.get(name)


def score_keys() -> frozenset[str]:
    """Every per-answer number that summaries average."""
    return frozenset(k for m in metrics().values() for k in m.scores)


def table_columns() -> list[tuple[str, str]]:
    """(label, key) of the published tables' columns, in their order."""
    cols = [c for m in metrics().values() for c in m.columns]
    return [(label, key) for label, key, _ in sorted(cols, key=lambda c: c[2])]
