"""The OpenAI-compatible HTTP endpoint with citations, and the web page."""

from .app import create_app
from .pipelines import ServedPipeline, make_served_pipeline

__all__ = ["ServedPipeline", "create_app", "make_served_pipeline"]
