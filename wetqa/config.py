"""Experiment configuration: a dataclass read from TOML, CLI overrides on top, saved beside results.

A top-layer module (beside ``wetqa.experiment``): its retriever and generator tables are checked
against the registries of the stages when the file is read, so a misspelt key is refused at once.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from pathlib import Path

from wetqa.evaluation.metrics import DEFAULT_METRICS
from wetqa.evaluation.scoring import setting_infos, settings_from


class ConfigError(ValueError):
    pass


@dataclass(slots=True)
class RetrieverSpec:
    """A ``[retrievers.NAME]`` table: an index to build (``retriever`` and its options), or a hybrid of others.

    Index options (``k1``, ``model``, ``article_weight`` ...) are checked against the retriever's own
    options when the experiment builds the index; the query-time keys are those of the retrieval spec.
    """

    name: str
    retriever: str = ""  # articles | bm25 | bm25s | dense ...; empty for a hybrid
    options: dict = field(default_factory=dict)  # the retriever's index options
    rescore: str | None = None  # dense re-scoring recorded in the index, with this model (folder or id)
    components: list[str] = field(default_factory=list)  # hybrid: names of other retrievers
    fusion: str = "rrf"
    weights: list[float] | None = None
    rerank: str | None = None
    rerank_top: int | None = None  # None: the retrieval spec's default (wetqa.retrieval.spec)


_RETRIEVER_KEYS = {"retriever", "rescore", "components", "fusion", "weights", "rerank", "rerank_top"}


@dataclass(slots=True)
class GeneratorSpec:
    """A ``[generators.NAME]`` table: ``generator`` (a preset or backend), ``backend``, and the backend's settings.

    The settings are checked against the backend's settings dataclass when the experiment resolves them.
    """

    name: str
    generator: str = "extractive"
    table: dict = field(default_factory=dict)  # every other key: backend and settings


@dataclass(slots=True)
class ExperimentConfig:
    name: str = "experiment"
    dataset: str = ""
    corpus: str = ""  # a built corpus folder, or a folder of law XML (built into <out>/corpus)
    chunking: str = "words150"
    out: str = "runs/experiment"
    runs: int = 1
    k: list[int] = field(default_factory=lambda: [3])
    language: str = "nl"
    metrics: list[str] = field(default_factory=lambda: list(DEFAULT_METRICS))
    # The model metrics' settings (judge, judge_base_url, nli_model ...): top-level keys of the TOML,
    # the same as `eval generation`'s flags, derived from the metrics' settings dataclasses.
    metric_settings: dict = field(default_factory=dict)
    retrievers: list[RetrieverSpec] = field(default_factory=list)
    generators: list[GeneratorSpec] = field(default_factory=list)
    # The row the others are tested against ("RETRIEVER+GENERATOR@kK", or without "@kK" for one k):
    # its table marks the cells that differ significantly (paired randomization test, Holm).
    baseline: str | None = None

    def to_json(self) -> dict:
        """The resolved config in the TOML's shape (the metric settings as top-level keys)."""
        out = asdict(self)
        return {**out, **out.pop("metric_settings")}

    def scoring(self):
        """What each cell's answers are scored with (one set of scorers for the whole grid)."""
        from wetqa.evaluation.scoring import Scoring, settings_from

        return Scoring(self.metrics, settings_from(self.metric_settings), Path(self.out) / "judge-cache")

    def labels(self) -> list[str]:
        """The table's row names, in grid order."""
        return [f"{r.name}+{g.name}@k{k}" for g in self.generators for r in self.retrievers for k in self.k]

    def baseline_label(self) -> str | None:
        if self.baseline is None:
            return None
        if self.baseline in self.labels():
            return self.baseline
        if len(self.k) == 1 and f"{self.baseline}@k{self.k[0]}" in self.labels():
            return f"{self.baseline}@k{self.k[0]}"
        raise ConfigError(f"baseline {self.baseline!r} is no row of the grid; rows: {', '.join(self.labels())}")

    def validate(self) -> ExperimentConfig:
        if not self.dataset:
            raise ConfigError('the experiment needs a dataset (dataset = "...jsonl")')
        if not self.corpus:
            raise ConfigError("the experiment needs a corpus (a built corpus folder or a folder of law XML)")
        if not self.metrics:
            raise ConfigError('metrics names no metric: give at least one (e.g. metrics = ["rouge"])')
        if self.runs < 1 or not self.k or min(self.k) < 1:
            raise ConfigError("runs and every k must be >= 1")
        from wetqa.retrieval import K_RANGE, MAX_K

        if max(self.k) > MAX_K:
            raise ConfigError(f"{K_RANGE}, got {max(self.k)}")
        if self.language not in ("nl", "en"):
            raise ConfigError(f'language must be "nl" or "en", got {self.language!r}')
        if not self.retrievers or not self.generators:
            raise ConfigError("the grid needs at least one [retrievers.NAME] and one [generators.NAME] table")
        names = {r.name for r in self.retrievers}
        for r in self.retrievers:
            if r.components and not set(r.components) <= names:
                raise ConfigError(
                    f"hybrid retriever {r.name!r} names unknown components {sorted(set(r.components) - names)}"
                )
            if not r.components and not r.retriever:
                raise ConfigError(
                    f'retriever {r.name!r} needs retriever = "articles" | "bm25s" | "bm25" | "dense" or components = [...]'
                )
        self.baseline_label()
        return self


def _retriever(name: str, table: dict) -> RetrieverSpec:
    from wetqa.retrieval.registry import retriever

    known = {k: v for k, v in table.items() if k in _RETRIEVER_KEYS}
    options = {k: v for k, v in table.items() if k not in _RETRIEVER_KEYS}
    if known.get("components") and options:
        raise ConfigError(f"[retrievers.{name}] a hybrid takes no index options: {', '.join(sorted(options))}")
    spec = RetrieverSpec(name=name, options=options, **known)
    if spec.retriever:
        try:
            retriever(spec.retriever).resolve(options)  # unknown options and bad values, named now
        except ValueError as exc:
            raise ConfigError(f"[retrievers.{name}] {exc}") from None
    return spec


def _generator(name: str, table: dict) -> GeneratorSpec:
    from wetqa.generation import GenerationError
    from wetqa.generation.spec import PipelineSpec

    table = dict(table)
    generator = table.pop("generator", "extractive")
    if not isinstance(generator, str):
        raise ConfigError(f"[generators.{name}] generator: expected a text, got {generator!r}")
    pipeline_keys = {"k", "language", "index", "fusion", "weights", "rescore", "rerank", "corpus"}
    misplaced = sorted(set(table) & pipeline_keys)
    if misplaced:
        raise ConfigError(f"[generators.{name}] unknown key(s) {', '.join(misplaced)} (not generator settings)")
    try:
        PipelineSpec.from_values({"generator": generator, **table}, f"[generators.{name}]")
    except (GenerationError, ValueError) as exc:
        raise ConfigError(str(exc)) from None
    return GeneratorSpec(name=name, generator=generator, table=table)


def _whole(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)  # TOML's true is a bool, which Python counts as an int


# What each top-level key of an experiment file must hold (the dataclass's types, said the way a user reads them).
_TYPES = {
    "runs": (_whole, "a whole number"),
    "k": (lambda v: isinstance(v, list) and all(_whole(x) for x in v), "a whole number or a list of them"),
    "metrics": (lambda v: isinstance(v, list) and v and all(isinstance(x, str) for x in v), "a list of metric names"),
    "baseline": (lambda v: isinstance(v, str), "a text"),
    **{
        key: (lambda v: isinstance(v, str), "a text")
        for key in ("name", "dataset", "corpus", "chunking", "out", "language")
    },
}


def _tables(path: Path, value, kind: str) -> dict:
    """``[retrievers.NAME]`` / ``[generators.NAME]``: a table of tables."""
    if not isinstance(value, dict) or not all(isinstance(t, dict) for t in value.values()):
        raise ConfigError(f"{path}: {kind} must be tables, [{kind}.NAME] with their keys, got {value!r}")
    return value


def _check_types(path: Path, data: dict) -> None:
    for key, value in data.items():
        ok, what = _TYPES.get(key, (None, ""))
        if ok is not None and not ok(value):
            raise ConfigError(f"{path}: {key} must be {what}, got {value!r}")


def load_experiment(path: str | Path, overrides: dict | None = None) -> ExperimentConfig:
    from wetqa.io import read_toml

    path = Path(path)
    data = read_toml(path, ConfigError)  # as a pipeline file is read: its dates as text, its errors one line
    base = path.parent
    retrievers = [_retriever(n, t) for n, t in _tables(path, data.pop("retrievers", {}), "retrievers").items()]
    generators = [_generator(n, t) for n, t in _tables(path, data.pop("generators", {}), "generators").items()]
    metric_keys = {i.name for i in setting_infos()}
    known = {f.name for f in fields(ExperimentConfig)} - {"metric_settings"}
    unknown = set(data) - known - metric_keys
    if unknown:
        raise ConfigError(f"{path}: unknown key(s) {', '.join(sorted(unknown))}")
    if isinstance(data.get("k"), int) and not isinstance(data.get("k"), bool):
        data["k"] = [data["k"]]
    if isinstance(data.get("metrics"), str):  # one metric
        data["metrics"] = [data["metrics"]]
    _check_types(path, data)
    settings = {k: data.pop(k) for k in list(data) if k in metric_keys}
    try:
        settings_from(settings, str(path))  # values checked now, not after the grid has run
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    cfg = ExperimentConfig(**data, metric_settings=settings, retrievers=retrievers, generators=generators)

    # Paths in the file are relative to the file.
    def beside_file(value):
        return str((base / value).resolve()) if value and not Path(value).is_absolute() else value

    cfg.dataset, cfg.corpus, cfg.out = beside_file(cfg.dataset), beside_file(cfg.corpus), beside_file(cfg.out)
    for key, value in (overrides or {}).items():
        if value is None:
            continue
        if key in ("only_retrievers", "only_generators"):
            kind = key.removeprefix("only_").removesuffix("s")
            names = [x.name for x in (cfg.retrievers if kind == "retriever" else cfg.generators)]
            not_named = [v for v in value if v not in names]
            if not_named:
                raise ConfigError(f"unknown {kind} {not_named[0]!r}: {path} names {', '.join(names) or 'none'}")
        if key == "only_retrievers":
            cfg.retrievers = [
                r
                for r in cfg.retrievers
                if r.name in value or any(r.name in x.components for x in cfg.retrievers if x.name in value)
            ]
        elif key == "only_generators":
            cfg.generators = [g for g in cfg.generators if g.name in value]
        else:
            setattr(cfg, key, value)
    return cfg.validate()
