"""Named generator presets with the published sampling settings.

GPT models: temperature 0.0, max_tokens 1000. Open models: temperature 0.2,
top_k 50, max_tokens 5000 (capped by the context window).
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass, replace
from typing import Any

from wetqa.console import check_model_ref

from ._base import Backend, GenerationError

KINDS = ("extractive", "openai", "transformers", "vllm")
DTYPES = ("auto", "float32", "float16", "bfloat16")
# The settings each backend honours; any other one given explicitly is rejected, not ignored.
_APPLIES = {
    "extractive": set(),
    "openai": {"temperature", "top_k", "max_tokens", "base_url", "api_key", "concurrency", "timeout"},
    "transformers": {"temperature", "top_k", "max_tokens", "dtype"},
    "vllm": {
        "temperature",
        "top_k",
        "max_tokens",
        "max_model_len",
        "dtype",
        "tensor_parallel_size",
        "pipeline_parallel_size",
        "data_parallel_size",
        "distributed_executor_backend",
    },
}
# Every setting a caller may override by name (a CLI flag or a [generators.NAME] key). Not the API key:
# it comes from the environment, and `serve --api-key` is the server's own key, not the generator's.
OVERRIDES = tuple(sorted(set().union(*_APPLIES.values()) - {"api_key"}))


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
    # vLLM's parallelism (see its docs): GPUs per model, pipeline stages, engine replicas, and
    # "ray" (or "mp") as the executor when a model spans several machines.
    tensor_parallel_size: int = 1
    pipeline_parallel_size: int = 1
    data_parallel_size: int = 1
    distributed_executor_backend: str | None = None

    def to_json(self) -> dict:
        d = asdict(self)
        d["api_key"] = "***" if self.api_key else None  # never written to result folders
        return d


_OPEN: dict[str, Any] = dict(temperature=0.2, top_k=50, max_tokens=5000)
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
        raise GenerationError(
            f"unknown generator {name!r}; presets: {', '.join(PRESETS)}; or a backend: {', '.join(KINDS)}"
        )
    if backend:
        if backend not in KINDS:
            raise GenerationError(f"unknown backend {backend!r}; choose one of {', '.join(KINDS)}")
        cfg = replace(cfg, kind=backend)
    if model:
        if cfg.kind == "extractive":
            raise GenerationError("--model does not apply to the extractive generator (it uses no model)")
        cfg = replace(cfg, model=model)
    given = {k: v for k, v in overrides.items() if v is not None}
    for key in given:
        if key not in _APPLIES[cfg.kind]:
            raise GenerationError(f"--{key.replace('_', '-')} does not apply to the {cfg.kind} generator")
    cfg = replace(cfg, **given)
    _check_ranges(cfg)
    if cfg.kind != "extractive" and not cfg.model:
        raise GenerationError(f"the {cfg.kind} backend needs a model (--model ID_OR_PATH)")
    if cfg.kind in ("transformers", "vllm"):
        check_model_ref(cfg.model)
    return cfg


def _check_ranges(cfg: GeneratorConfig) -> None:
    if not cfg.temperature >= 0:
        raise GenerationError(f"temperature must be >= 0, got {cfg.temperature}")
    if cfg.max_tokens < 1 or cfg.concurrency < 1 or (cfg.top_k is not None and cfg.top_k < 1):
        raise GenerationError("max_tokens, concurrency and top_k must be >= 1")
    if not cfg.timeout > 0:
        raise GenerationError(f"timeout must be > 0 seconds, got {cfg.timeout}")
    if cfg.max_model_len is not None and cfg.max_model_len < 1:
        raise GenerationError(f"max_model_len must be >= 1, got {cfg.max_model_len}")
    if min(cfg.tensor_parallel_size, cfg.pipeline_parallel_size, cfg.data_parallel_size) < 1:
        raise GenerationError("tensor, pipeline and data parallel sizes must be >= 1")
    if cfg.distributed_executor_backend not in (None, "ray", "mp", "uni", "external_launcher"):
        raise GenerationError(
            f"unknown distributed executor backend {cfg.distributed_executor_backend!r}; use ray, mp, uni or "
            "external_launcher"
        )
    if cfg.dtype not in DTYPES:
        raise GenerationError(f"unknown dtype {cfg.dtype!r}; choose one of {', '.join(DTYPES)}")


def make_backend(cfg: GeneratorConfig) -> Backend:
    if cfg.kind == "extractive":
        from .backends.extractive import ExtractiveBackend

        return ExtractiveBackend()
    if cfg.kind == "openai":
        from .backends.openai_backend import OpenAIBackend

        return OpenAIBackend(
            cfg.model,
            base_url=cfg.base_url,
            api_key=cfg.api_key or os.environ.get("OPENAI_API_KEY"),
            temperature=cfg.temperature,
            max_tokens=cfg.max_tokens,
            top_k=cfg.top_k,
            concurrency=cfg.concurrency,
            timeout=cfg.timeout,
        )
    if cfg.kind == "transformers":
        from .backends.transformers_backend import TransformersBackend

        return TransformersBackend(
            cfg.model, temperature=cfg.temperature, top_k=cfg.top_k, max_tokens=cfg.max_tokens, dtype=cfg.dtype
        )
    if cfg.kind == "vllm":
        from .backends.vllm_backend import VLLMBackend

        return VLLMBackend(
            cfg.model,
            temperature=cfg.temperature,
            top_k=cfg.top_k,
            max_tokens=cfg.max_tokens,
            max_model_len=cfg.max_model_len,
            dtype=cfg.dtype,
            tensor_parallel_size=cfg.tensor_parallel_size,
            pipeline_parallel_size=cfg.pipeline_parallel_size,
            data_parallel_size=cfg.data_parallel_size,
            distributed_executor_backend=cfg.distributed_executor_backend,
        )
    raise GenerationError(f"unknown backend {cfg.kind!r}")
