"""Models that evaluation calls (judges, claim prompts) named one way, and run by wetqa's generator backends.

``BACKEND:MODEL`` runs ``MODEL`` on a registered generator backend (``transformers:PATH`` for a
local model, also a .gguf file); a model named without one runs on the OpenAI API, or on the
OpenAI-compatible server at ``base_url`` (vLLM's, llama.cpp's, wetqa's own).
"""

from __future__ import annotations

from wetqa.generation import GenerationError, GeneratorConfig, Request, make_backend, resolve_generator
from wetqa.generation.registry import backends  # not the package attribute: the backends subpackage shadows it

DEFAULT_BACKEND = "openai"


def model_config(spec: str, base_url: str | None = None, what: str = "model", **settings) -> GeneratorConfig:
    """The generator configuration of ``spec``; ``settings`` the backend lacks are refused (None: not given)."""
    kind, sep, model = spec.partition(":")
    if not (sep and kind in backends()):
        kind, model = DEFAULT_BACKEND, spec
    given = {k: v for k, v in {"base_url": base_url, **settings}.items() if v is not None}
    try:
        return resolve_generator(kind, model=model, **given)
    except GenerationError as exc:
        raise GenerationError(f"{what} {spec!r}: {exc}") from None


def make_completer(spec: str, base_url: str | None = None, max_tokens: int = 300):
    """prompt -> text of the model ``spec`` (see :func:`model_config`), greedy."""
    backend = make_backend(model_config(spec, base_url, temperature=0.0, max_tokens=max_tokens))

    def complete(prompt: str) -> str:
        gen = backend.generate([Request("", [], [{"role": "user", "content": prompt}])])[0]
        if gen.error:
            raise GenerationError(gen.error)
        return gen.text

    return complete
