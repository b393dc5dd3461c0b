"""Plain prompt -> text completion over wetqa's generator backends (for judges and claim prompts)."""

from __future__ import annotations

from wetqa.generation import GenerationError, Request, make_backend, resolve_generator


def make_completer(spec: str, base_url: str | None = None, max_tokens: int = 300):
    """``transformers:PATH`` (also a .gguf file) for a local model; otherwise a model name on an
    OpenAI-compatible endpoint (``base_url``) or the OpenAI API. Greedy decoding."""
    if spec.startswith("transformers:"):
        cfg = resolve_generator("transformers", model=spec.split(":", 1)[1], temperature=0.0, max_tokens=max_tokens)
    else:
        cfg = resolve_generator("openai", model=spec, base_url=base_url, temperature=0.0, max_tokens=max_tokens)
    backend = make_backend(cfg)

    def complete(prompt: str) -> str:
        gen = backend.generate([Request("", [], [{"role": "user", "content": prompt}])])[0]
        if gen.error:
            raise GenerationError(gen.error)
        return gen.text

    return complete
