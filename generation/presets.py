"""Generator configurations: named presets with the published settings, or a backend with its settings.

GPT models: temperature 0.0, max_tokens 1000. Open models: temperature 0.2, top_k 50,
max_tokens 5000 (capped by the context window). Which settings exist, their ranges and which of
them a backend honours come from the backend's registry entry (:mod:`.registry`), never from a
list kept here.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from typing import Any

from wetqa.console import check_model_ref
from wetqa.settings import SettingError, build, check

from ._base import OPEN_MODEL_DEFAULTS, Backend, GenerationError
from .registry import BackendInfo, all_settings, backend, backends, output_setting_names


@dataclass(frozen=True, slots=True)
class Preset:
    kind: str
    values: dict  # settings of the backend
    note: str = ""  # what a user should know before choosing it (availability, licence gate)


_GPT = {"temperature": 0.0, "max_tokens": 1000}
_OPEN = OPEN_MODEL_DEFAULTS
GEITJE_OFFLINE = "may be unavailable: taken offline in 2025 (a demand by BREIN about its training data)"
GATED = "gated: accept the licence on the model's Hugging Face page first"


def _open(model: str, window: int | None = None, note: str = "", **more) -> Preset:
    """An open model on vLLM with the published sampling. ``window``: the context vLLM reserves (a model
    whose own window is far longer than a prompt and 5000 tokens need gets a bound that fits one GPU);
    None keeps the model's own, as the published runs did."""
    values = {"model": model, **_OPEN, **more}
    if window:
        values["max_model_len"] = window
    return Preset("vllm", values, note)


PRESETS: dict[str, Preset] = {
    "extractive": Preset("extractive", {}),
    "gpt-4o": Preset("openai", {"model": "gpt-4o", **_GPT}),
    "gpt-3.5-turbo": Preset("openai", {"model": "gpt-3.5-turbo", **_GPT}),
    # The published comparison's open models (kept as they were run).
    "geitje-7b-ultra": _open("BramVanroy/GEITje-7B-ultra", note=GEITJE_OFFLINE),
    "llama-3-8b-dutch": _open("ReBatch/Llama-3-8B-dutch"),
    "fietje-2": _open("BramVanroy/fietje-2-instruct"),
    # Open models with good Dutch that can be downloaded today.
    "fietje-2-chat": _open("BramVanroy/fietje-2-chat", 2048),  # Phi-2 based, 2.7B, Dutch; its window is 2048
    "eurollm-9b-instruct": _open("utter-project/EuroLLM-9B-Instruct", 4096, GATED),  # EU languages, Apache 2.0
    "gemma-3-12b-it": _open("google/gemma-3-12b-it", 32768, GATED),  # 128k window, 140+ languages
    "gemma-3-27b-it": _open("google/gemma-3-27b-it", 32768, GATED),
    # Qwen3 thinks aloud by default; its chat template's enable_thinking=False answers directly (and a
    # schema-constrained answer leaves it no room to think anyway). 32k is its native window.
    "qwen3-8b": _open("Qwen/Qwen3-8B", 32768, thinking=False),
    "qwen3-14b": _open("Qwen/Qwen3-14B", 32768, thinking=False),
}


def _info(kind: str) -> BackendInfo:
    try:
        return backend(kind)
    except KeyError:
        raise GenerationError(f"unknown backend {kind!r}; choose one of {', '.join(backends())}") from None


@dataclass(frozen=True, slots=True)
class GeneratorConfig:
    """A backend kind and its settings (an instance of the backend's settings dataclass).

    ``name`` is what was asked for: a preset (``gpt-4o``) or the kind itself.
    """

    kind: str
    settings: Any = None
    name: str = ""

    def __post_init__(self) -> None:
        info = _info(self.kind)
        if self.settings is None:
            object.__setattr__(self, "settings", info.settings(**info.defaults))
        elif not isinstance(self.settings, info.settings):
            raise GenerationError(f"settings of type {type(self.settings).__name__} are not {self.kind} settings")
        if not self.name:
            object.__setattr__(self, "name", self.kind)

    @property
    def model(self) -> str:
        return str(asdict(self.settings).get("model", ""))

    def to_json(self) -> dict:
        return {"generator": self.name, "kind": self.kind, **asdict(self.settings)}

    def output_json(self) -> dict:
        """The settings that change what the generator writes (every backend's, None where this one has none):
        what a run folder records and a resume compares."""
        values = asdict(self.settings)
        return {"kind": self.kind, **{name: values.get(name) for name in output_setting_names()}}


def overridable() -> tuple[str, ...]:
    """Every setting a caller may give by name (a CLI flag, a [generators.NAME] key, a serve flag)."""
    return tuple(s.name for s in all_settings())


def resolve_generator(name: str, backend: str | None = None, model: str | None = None, **overrides) -> GeneratorConfig:
    """A preset by name, or a backend kind (``transformers``, ``vllm``, ``openai``) with ``model``.

    ``backend`` moves a preset to another engine (e.g. transformers, or openai for a ``vllm serve``
    server given by ``base_url``); the preset's settings that engine does not have are left behind.
    A setting given that the backend does not have is refused, never ignored.
    """
    if name in PRESETS:
        preset = PRESETS[name]
    elif name in backends():
        preset = Preset(name, dict(_info(name).defaults))
    else:
        raise GenerationError(
            f"unknown generator {name!r}; presets: {', '.join(PRESETS)}; or a backend: {', '.join(backends())}"
        )
    kind = backend or preset.kind
    info = _info(kind)
    own = {f.name for f in fields(info.settings)}
    values = {k: v for k, v in preset.values.items() if k in own}
    if backend and backend != preset.kind:
        values = {**info.defaults, **values}
    given = {k: v for k, v in overrides.items() if v is not None}
    if model is not None:
        given["model"] = model
    for key in given:
        if key not in own:
            if key == "model":
                raise GenerationError(f"--model does not apply to the {kind} generator (it uses no model)")
            raise GenerationError(f"--{key.replace('_', '-')} does not apply to the {kind} generator")
    try:
        settings = check(build(info.settings, {**values, **given}, kind))
    except SettingError as exc:
        raise GenerationError(str(exc)) from None
    cfg = GeneratorConfig(kind, settings, name)
    if info.uses_model and not cfg.model:
        raise GenerationError(f"the {kind} backend needs a model (--model ID_OR_PATH)")
    if info.local_model:
        check_model_ref(cfg.model)
    return cfg


def make_backend(cfg: GeneratorConfig) -> Backend:
    """The backend of a configuration; one line naming the extra to install when its packages are missing."""
    info = _info(cfg.kind)
    info.check_available()
    return info.create(cfg.settings)
