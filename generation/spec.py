"""A whole pipeline as one record: retrieval, generator and its settings, k and language; ``build()`` makes it.

``wetqa ask``, ``generate``, ``serve`` and ``experiment`` all build their pipelines from a
:class:`PipelineSpec`, whose fields come from the same place whether they were given as flags, as a
TOML file (``--config``), or in code: what one command can set, every command can. The flags are
derived from the settings dataclasses (the retrieval spec, every registered backend's settings, and
the pipeline's own), so they are declared once.
"""

from __future__ import annotations

import argparse
import hashlib
import json
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from wetqa.retrieval import K_RANGE, MAX_K, RetrievalError
from wetqa.retrieval.spec import RETRIEVAL_SETTINGS, RetrievalSpec
from wetqa.settings import SettingError, add_arguments, build, coerce, given, setting, settings_of

from ._base import GenerationError
from .presets import PRESETS, GeneratorConfig, resolve_generator
from .registry import all_settings, backends


@dataclass(frozen=True, slots=True)
class PipelineOptions:
    """The pipeline's own settings (beside retrieval and the generator)."""

    k: int = setting(
        3, "retrieved hits given to the generator", minimum=1, maximum=MAX_K, invalid=K_RANGE, flag="-k", output=True
    )
    language: str = setting("nl", "prompt language", choices=("nl", "en"), output=True)
    min_confidence: float | None = setting(
        None,
        "abstain (answer that no article of the corpus answers the question) below this confidence; "
        "0: always answer (default: the cross-validated threshold)",
        minimum=0,
        maximum=1,
        output=True,
    )


PIPELINE_SETTINGS = settings_of(PipelineOptions)


@dataclass(frozen=True, slots=True)
class PipelineSpec:
    retrieval: RetrievalSpec = field(default_factory=RetrievalSpec)
    generator: GeneratorConfig = field(default_factory=lambda: GeneratorConfig("extractive"))
    options: PipelineOptions = field(default_factory=PipelineOptions)

    @property
    def k(self) -> int:
        return self.options.k

    @property
    def language(self) -> str:
        return self.options.language

    # ------------------------------------------------------------------------ from values
    @classmethod
    def from_values(cls, values: dict, where: str = "") -> PipelineSpec:
        """A spec from one flat mapping (a TOML table, the flags given): keys are setting names."""
        values = dict(values)
        prefix = f"{where}: " if where else ""
        retrieval_keys = {s.name for s in RETRIEVAL_SETTINGS}
        pipeline_keys = {s.name for s in PIPELINE_SETTINGS}
        generator_keys = {s.name for s in all_settings()}
        unknown = sorted(set(values) - retrieval_keys - pipeline_keys - generator_keys - {"generator", "backend"})
        if unknown:
            raise GenerationError(f"{prefix}unknown key(s) {', '.join(unknown)}")
        try:
            retrieval = build(RetrievalSpec, {k: v for k, v in values.items() if k in retrieval_keys}, where)
            options = build(PipelineOptions, {k: v for k, v in values.items() if k in pipeline_keys}, where)
            name = values.get("generator", "extractive")
            backend = values.get("backend")
            for key, value in (("generator", name), ("backend", backend)):
                if value is not None and not isinstance(value, str):
                    raise SettingError(f"{prefix}{key}: expected a text, got {value!r}")
            settings = {k: v for k, v in values.items() if k in generator_keys}
            infos = {s.name: s for s in all_settings()}
            settings = {k: coerce(infos[k], v, f"{where}.{k}" if where else k) for k, v in settings.items()}
        except SettingError as exc:
            raise GenerationError(str(exc)) from None
        generator = resolve_generator(name, backend=backend, **settings)
        try:
            retrieval.validate()
        except RetrievalError as exc:
            raise GenerationError(f"{prefix}{exc}") from None
        return cls(retrieval, generator, options)

    @classmethod
    def from_toml(cls, path: str | Path, overrides: dict | None = None) -> PipelineSpec:
        """A spec from a TOML file (flat keys, or a ``[pipeline]`` table), ``overrides`` on top."""
        values = read_toml(path)
        values = values.get("pipeline", values)
        base = Path(path).resolve().parent
        # Paths in the file are relative to the file.
        if "index" in values:
            index = [values["index"]] if isinstance(values["index"], str) else values["index"]
            if isinstance(index, list):
                values["index"] = [str(base / p) if isinstance(p, str) else p for p in index]
        for key in ("corpus",):
            if isinstance(values.get(key), str):
                values[key] = str(base / values[key])
        return cls.from_values({**values, **(overrides or {})}, str(path))

    # ------------------------------------------------------------------------ the CLI
    @staticmethod
    def add_cli_args(parser: argparse.ArgumentParser, pipeline: bool = True) -> None:
        """The flags of every part of a spec (``pipeline=False``: retrieval only)."""
        RetrievalSpec.add_cli_args(parser)
        if not pipeline:
            return
        g = parser.add_argument_group("generation")
        g.add_argument(
            "--generator",
            default=None,
            help=f"preset ({', '.join(PRESETS)}) or backend ({', '.join(backends())}); default extractive",
        )
        g.add_argument("--backend", choices=tuple(backends()), help="run a preset on another engine")
        owners: dict[str, list[str]] = {}
        for name, info in backends().items():
            for s in info.infos:
                owners.setdefault(s.name, []).append(name)
        infos = [replace(s, help=f"{s.help} [{', '.join(owners[s.name])}]") for s in all_settings()]
        add_arguments(g, infos, seen=set(), defaults_in_help=False)
        add_arguments(parser.add_argument_group("pipeline"), PIPELINE_SETTINGS)
        parser.add_argument(
            "--config", metavar="TOML", help="pipeline settings from a TOML file (flags given override them)"
        )

    @classmethod
    def from_cli_args(cls, args: argparse.Namespace) -> PipelineSpec:
        values = given(args, [*RETRIEVAL_SETTINGS, *all_settings(), *PIPELINE_SETTINGS])
        given_args = vars(args)  # the flags of the command that parsed them (not every command has each)
        for key in ("generator", "backend"):
            if given_args.get(key) is not None:
                values[key] = given_args[key]
        if given_args.get("config"):
            return cls.from_toml(args.config, values)
        return cls.from_values(values)

    # ------------------------------------------------------------------------ using it
    def build(self, retriever=None, backend=None):
        """The runnable :class:`~.pipeline.Pipeline` (a retriever or backend given is used instead of opening one).

        A ``listwise`` re-ranker asks the pipeline's own generator: its backend is handed to retrieval as a
        function of chat messages, so retrieval imports no generator."""
        from .pipeline import Pipeline
        from .presets import make_backend

        backend = backend if backend is not None else make_backend(self.generator)
        return Pipeline(
            retriever if retriever is not None else self.retrieval.build(completer(backend)),
            backend,
            k=self.k,
            language=self.language,
            min_confidence=self.options.min_confidence,
        )

    def inputs(self) -> dict:
        """What a run's answers depend on (:func:`~.runs.run_inputs`): a run folder resumes only with the same."""
        from wetqa.retrieval.pipeline import model_digests

        from .runs import run_inputs

        ident = self.retrieval.identity()
        kinds = "+".join(str(i.get("retriever")) for i in ident["indexes"])
        inputs = run_inputs(
            kinds, self.k, self.language, self.generator.output_json(), ident["indexes"], ident["query"]
        )
        # Abstaining decides which questions reach the model: its threshold and the fitted model count too.
        digests = model_digests()
        inputs["abstention"] = {"min_confidence": self.options.min_confidence, "model": digests["confidence"]}
        # The fitted ranking and the lexicon decide which articles answer: a refit is another run.
        inputs["models"] = digests
        return inputs

    def to_json(self) -> dict:
        return {
            "retrieval": self.retrieval.to_json(),
            "generator": self.generator.to_json(),
            "options": {f.name: getattr(self.options, f.name) for f in fields(self.options)},
        }

    def digest(self) -> str:
        """A hash of the spec (saved beside results, so two result folders tell whether they share one)."""
        return hashlib.sha256(json.dumps(self.to_json(), sort_keys=True, default=str).encode()).hexdigest()[:16]

    def with_options(self, **changes: Any) -> PipelineSpec:
        return replace(self, options=replace(self.options, **changes))


def completer(backend, max_tokens: int = 200):
    """Chat messages -> the backend's text, greedy (what a ``listwise`` re-ranker asks a language model); None
    for a backend that runs no language model (the extractive one)."""
    if not backend.uses_model:
        return None
    from ._base import GenerationError, Request, Sampling

    supported = backend.supports
    sampling = Sampling(
        temperature=0.0 if "temperature" in supported else None,
        max_tokens=max_tokens if "max_tokens" in supported else None,
    )

    def complete(batch: list[list[dict]]) -> list[str]:
        gens = backend.generate([Request("", [], messages, sampling) for messages in batch])
        failed = next((g.error for g in gens if g.error), None)
        if failed:
            raise GenerationError(f"the listwise re-ranker's model failed: {failed}")
        return [g.text for g in gens]

    return complete


def read_toml(path: str | Path) -> dict:
    from wetqa.io import read_toml as read

    return read(path, GenerationError)
