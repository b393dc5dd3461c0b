"""Cited answers: prompt, generator backends, and the forgiving output parser.

>>> from wetqa.generation import Pipeline, make_backend, resolve_generator
"""

from ._base import (
    Answer,
    AsyncStreamingBackend,
    Backend,
    Citation,
    ContextOverflowError,
    Generation,
    GenerationError,
    Request,
    Sampling,
    StreamingBackend,
    UnsupportedSetting,
    Usage,
    check_sampling,
)
from .parser import ParsedOutput, parse_output
from .pipeline import Pipeline
from .presets import PRESETS, GeneratorConfig, make_backend, resolve_generator
from .prompt import build_messages, build_request

__all__ = [
    "Answer",
    "AsyncStreamingBackend",
    "Backend",
    "Citation",
    "ContextOverflowError",
    "Generation",
    "GenerationError",
    "GeneratorConfig",
    "PRESETS",
    "ParsedOutput",
    "Pipeline",
    "Request",
    "Sampling",
    "StreamingBackend",
    "UnsupportedSetting",
    "Usage",
    "build_messages",
    "build_request",
    "check_sampling",
    "make_backend",
    "parse_output",
    "resolve_generator",
]
