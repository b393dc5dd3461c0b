"""Experiment configuration: a dataclass read from TOML, CLI overrides on top, saved beside results."""

from __future__ import annotations

import tomllib
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path


class ConfigError(ValueError):
    pass


@dataclass(slots=True)
class RetrieverSpec:
    name: str
    retriever: str = ""  # articles | bm25 | bm25s | dense; empty for a hybrid
    model: str | None = None  # dense
    rescore: str | None = None  # dense re-scoring of the top hits with this model (folder or id)
    components: list[str] = field(default_factory=list)  # hybrid: names of other retrievers
    fusion: str = "rrf"
    weights: list[float] | None = None


@dataclass(slots=True)
class GeneratorSpec:
    name: str
    generator: str = "extractive"  # preset or backend kind
    backend: str | None = None
    model: str | None = None
    base_url: str | None = None
    temperature: float | None = None
    max_tokens: int | None = None
    max_model_len: int | None = None
    dtype: str | None = None
    tensor_parallel_size: int | None = None
    pipeline_parallel_size: int | None = None
    data_parallel_size: int | None = None
    distributed_executor_backend: str | None = None


@dataclass(slots=True)
class ExperimentConfig:
    name: str = "experiment"
    dataset: str = ""
    corpus: str = ""  # a built corpus folder, or a folder of law XML (built into <out>/corpus)
    chunking: str = "words150"
    out: str = "runs/experiment"
    runs: int = 1
    k: list[int] = field(default_factory=lambda: [3])
    metrics: list[str] = field(default_factory=lambda: ["rouge", "meteor", "citations"])
    judge: str | None = None
    judge_base_url: str | None = None
    nli_model: str | None = None
    retrievers: list[RetrieverSpec] = field(default_factory=list)
    generators: list[GeneratorSpec] = field(default_factory=list)

    def to_json(self) -> dict:
        return asdict(self)

    def validate(self) -> ExperimentConfig:
        if not self.dataset:
            raise ConfigError('the experiment needs a dataset (dataset = "...jsonl")')
        if not self.corpus:
            raise ConfigError("the experiment needs a corpus (a built corpus folder or a folder of law XML)")
        if self.runs < 1 or not self.k or min(self.k) < 1:
            raise ConfigError("runs and every k must be >= 1")
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
        return self


def _build(cls, name: str, table: dict):
    known = {f.name for f in fields(cls)} - {"name"}
    unknown = set(table) - known
    if unknown:
        raise ConfigError(f"[{cls.__name__} {name}] unknown key(s): {', '.join(sorted(unknown))}")
    return cls(name=name, **table)


def load_experiment(path: str | Path, overrides: dict | None = None) -> ExperimentConfig:
    path = Path(path)
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ConfigError(f"config file not found: {path}") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: not valid TOML ({exc})") from None
    base = path.parent
    retrievers = [_build(RetrieverSpec, n, t) for n, t in (data.pop("retrievers", {}) or {}).items()]
    generators = [_build(GeneratorSpec, n, t) for n, t in (data.pop("generators", {}) or {}).items()]
    known = {f.name for f in fields(ExperimentConfig)}
    unknown = set(data) - known
    if unknown:
        raise ConfigError(f"{path}: unknown key(s) {', '.join(sorted(unknown))}")
    if isinstance(data.get("k"), int):
        data["k"] = [data["k"]]
    cfg = ExperimentConfig(**data, retrievers=retrievers, generators=generators)
    # Paths in the file are relative to the file.
    for attr in ("dataset", "corpus", "out"):
        value = getattr(cfg, attr)
        if value and not Path(value).is_absolute():
            setattr(cfg, attr, str((base / value).resolve()))
    for key, value in (overrides or {}).items():
        if value is None:
            continue
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
