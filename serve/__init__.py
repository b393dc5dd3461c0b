"""The OpenAI-compatible HTTP endpoint with citations, and the web page.

Names are imported from their modules when first used: ``wetqa serve --help`` and the rest of the
CLI never import FastAPI or uvicorn (the ``serve`` extra).
"""

from typing import TYPE_CHECKING

from wetqa.lazy import lazy

_EXPORTS = {
    **dict.fromkeys(["ServerConfig", "create_app"], ".app"),
    **dict.fromkeys(["ServedPipeline", "served_pipeline_name"], ".pipelines"),
}
__all__ = sorted(_EXPORTS)
__getattr__, __dir__ = lazy(__name__, _EXPORTS)

if TYPE_CHECKING:
    from .app import ServerConfig, create_app
    from .pipelines import ServedPipeline, served_pipeline_name
