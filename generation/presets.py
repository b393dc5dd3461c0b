"""Named generator presets with the published sampling settings.

GPT models: temperature 0.0, max_tokens 1000. Open models: temperature 0.2,
top_k 50, max_tokens 5000 (capped by the context window).
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass, replace

from ._base import Backend, GenerationError

KINDS = ("extractive", "openai", "transformers", "vllm")


@dataclass(frozen=True, slots=True)
class GeneratorConfig:
    kind: str  # extractive | openai | transformers | vllm
    model: str = ""
    temperature: float = 0.0
    top_k: int | None = None
    max_tokens: int = 1000
    base_url: str | None = None
    api_key: str | None = None
    concurrency: int = 8
    timeout: float = 120.0
    max_model_len: int | None = None
    dtype: str = "auto"

    def to_json(self) -> dict:
        d = asdict(self)
        d["api_key"] = "***" if self.api_key else None  # never written to result folders
        return d


_OPEN = dict(temperature=0.2, top_k=50, max_tokens=5000)
PRESETS: dict[str, GeneratorConfig] = {
    "extractive": GeneratorConfig("extractive"),
    "gpt-4o": GeneratorConfig("openai", "gpt-4o", temperature=0.0, max_tokens=1000),
    "gpt-3.5-turbo": GeneratorConfig("openai", "gpt-3.5-turbo", temperature=0.0, max_tokens=1000),
    "geitje-7b-ultra": GeneratorConfig("vllm", "BramVanroy/GEITje-7B-ultra", **_OPEN),
    "llama-3-8b-dutch": GeneratorConfig("vllm", "ReBatch/Llama-3-8B-dutch", **_OPEN),
    "fietje-2": GeneratorConfig("vllm", "BramVanroy/fietje-2-instruct", **_OPEN),
}


def resolve_generator(name: str, backend: str | None = None, model: str | None = None, **overrides) -> GeneratorConfig:
    """A preset by name, or a backend kind (``transformers``, ``vllm``, ``openai``) with ``model``.

    ``backend`` moves an open-model preset to another engine (e.g. transformers,
    or openai for a ``vllm serve`` server given by ``base_url``).
    """
    if name in PRESETS:
        cfg = PRESETS[name]
    elif name in KINDS:
        defaults = {} if name in ("extractive", "openai") else _OPEN
        cfg = GeneratorConfig(name, **defaults)
    else:
        raise GenerationError(f"unknown generator {name!r}; presets: {', '.join(PRESETS)}; or a backend: {', '.join(KINDS)}")
    if backend:
        if backend not in KINDS:
            raise GenerationError(f"unknown backend {backend!r}; choose one of {', '.join(KINDS)}")
        cfg = replace(cfg, kind=backend)
    if model:
        cfg = replace(cfg, model=model)
    cfg = replace(cfg, **{k: v for k, v in overrides.items() if v is not None})
    if cfg.kind != "extractive" and not cfg.model:
        raise GenerationError(f"the {cfg.kind} backend needs a model (--model ID_OR_PATH)")
    return cfg


def make_backend(cfg: GeneratorConfig) -> Backend:
    if cfg.kind == "extractive":
        from .backends.extractive import ExtractiveBackend

        return ExtractiveBackend()
    if cfg.kind == "openai":
        from .backends.openai_backend import OpenAIBackend

        return OpenAIBackend(cfg.model, base_url=cfg.base_url, api_key=cfg.api_key or os.environ.get("OPENAI_API_KEY"),
                             temperature=cfg.temperature, max_tokens=cfg.max_tokens, top_k=cfg.top_k,
                             concurrency=cfg.concurrency, timeout=cfg.timeout)
    if cfg.kind == "transformers":
        from .backends.transformers_backend import TransformersBackend

        return TransformersBackend(cfg.model, temperature=cfg.temperature, top_k=cfg.top_k, max_tokens=cfg.max_tokens, dtype=cfg.dtype)
    if cfg.kind == "vllm":
        from .backends.vllm_backend import VLLMBackend

        return VLLMBackend(cfg.model, temperature=cfg.temperature, top_k=cfg.top_k, max_tokens=cfg.max_tokens,
                           max_model_len=cfg.max_model_len, dtype=cfg.dtype)
    raise GenerationError(f"unknown backend {cfg.kind!r}")
