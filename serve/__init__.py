"""The OpenAI-compatible HTTP endpoint with citations, and the web page."""

from .app import create_app
from .presets import ServePreset, make_preset

__all__ = ["ServePreset", "create_app", "make_preset"]
