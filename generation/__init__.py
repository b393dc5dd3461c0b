"""Cited answers: prompt, generator backends, and the forgiving output parser.

>>> from wetqa.generation import PipelineSpec
>>> pipeline = PipelineSpec().build()   # the default index, the extractive generator
>>> pipeline.ask("Wanneer kan de rechter het gezag van een ouder beëindigen?")

Names are imported from their modules when first used.
"""

from typing import TYPE_CHECKING

from wetqa.lazy import lazy

_EXPORTS = {
    **dict.fromkeys(
        [
            "Answer",
            "AsyncStreamingBackend",
            "Backend",
            "BackendBase",
            "Citation",
            "ContextOverflowError",
            "Generation",
            "GenerationError",
            "ModelSettings",
            "Request",
            "Sampling",
            "StreamedSentence",
            "StreamingBackend",
            "UnsupportedSetting",
            "UpstreamTimeout",
            "Usage",
            "check_sampling",
            "cut_at_stop",
        ],
        "._base",
    ),
    **dict.fromkeys(["ParsedOutput", "parse_output"], ".parser"),
    "Pipeline": ".pipeline",
    **dict.fromkeys(["PRESETS", "GeneratorConfig", "make_backend", "resolve_generator"], ".presets"),
    **dict.fromkeys(["build_messages", "build_request"], ".prompt"),
    **dict.fromkeys(["BackendInfo", "backends", "register"], ".registry"),
    **dict.fromkeys(["PipelineOptions", "PipelineSpec"], ".spec"),
}
__all__ = sorted(_EXPORTS)
__getattr__, __dir__ = lazy(__name__, _EXPORTS)

if TYPE_CHECKING:
    from ._base import (
        Answer,
        AsyncStreamingBackend,
        Backend,
        BackendBase,
        Citation,
        ContextOverflowError,
        Generation,
        GenerationError,
        ModelSettings,
        Request,
        Sampling,
        StreamedSentence,
        StreamingBackend,
        UnsupportedSetting,
        UpstreamTimeout,
        Usage,
        check_sampling,
        cut_at_stop,
    )
    from .parser import ParsedOutput, parse_output
    from .pipeline import Pipeline
    from .presets import PRESETS, GeneratorConfig, make_backend, resolve_generator
    from .prompt import build_messages, build_request
    from .registry import BackendInfo, backends, register
    from .spec import PipelineOptions, PipelineSpec
