"""The OpenAI-compatible HTTP API and the web page, assembled from their parts.

``POST /v1/chat/completions`` answers the last user message with the pipeline named by ``model``
(non-streaming, or server-sent events with ``stream``), ``GET /v1/models``, ``POST /v1/search``,
``GET /v1/chunks/{id}``, ``GET /health``, the page at ``/`` and the docs at ``/docs``. Errors use
OpenAI's error shape. The parts: :mod:`.protocol` (wire format), :mod:`.service` (slots, workers,
deadlines, chat and stream), :mod:`.middleware` (key, body limits, headers), :mod:`.routes`,
:mod:`.docs`, :mod:`.errors`.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence

from fastapi import FastAPI
from starlette.middleware.cors import CORSMiddleware

from wetqa import __version__

from .config import ServerConfig
from .docs import docs_router, openapi_schema
from .errors import HANDLERS
from .middleware import GuardMiddleware
from .pipelines import ServedPipeline
from .routes import page_router, router
from .service import ChatService

__all__ = ["ServerConfig", "create_app"]


# What /docs says to the users of the API (the module's docstring above is for its developers).
API_DESCRIPTION = """Answers questions about Dutch law with the articles they rest on, in OpenAI's wire format:
any `openai` client works (`base_url` ending in `/v1`), streaming too.

- `POST /v1/chat/completions`: the last user message is the question; the answer cites its articles with
  `[n]` markers and adds `citations`, `sentences`, `confidence` and `abstained` to OpenAI's fields.
- `POST /v1/search`: the ranked articles for a query.
- `GET /v1/models`, `GET /v1/models/{model}`: the served pipelines.
- `GET /v1/chunks/{id}`, `GET /v1/articles/{law_id}/{article}/versions`: a cited text with its article, and an
  article's versions with the words changed between two.

Errors have OpenAI's shape, `{"error": {"message", "type", "param", "code"}}`."""


def create_app(pipelines: Sequence[ServedPipeline], config: ServerConfig | None = None) -> FastAPI:
    config = config or ServerConfig()
    if config.api_key is not None and not config.api_key.strip():
        raise ValueError("an empty API key would turn authentication off; give a key, or no --api-key at all")
    # FastAPI's own /docs loads Swagger UI from a CDN: off; .docs serves it from local files instead.
    app = FastAPI(title="wetqa", version=__version__, description=API_DESCRIPTION, docs_url=None, redoc_url=None)
    app.state.service = ChatService(pipelines, config)
    app.openapi = functools.partial(openapi_schema, app)  # type: ignore[method-assign]  # FastAPI's documented hook
    for exc_class, handler in HANDLERS:
        app.add_exception_handler(exc_class, handler)
    app.add_middleware(
        GuardMiddleware, api_key=config.api_key, max_body_bytes=config.max_body_bytes, body_timeout=config.body_timeout
    )
    if config.cors_origin:  # outside the guard: a browser's preflight carries no key and must still be answered
        app.add_middleware(
            CORSMiddleware,
            allow_origins=list(config.cors_origin),
            allow_methods=["GET", "POST", "OPTIONS"],
            # Any header: the openai JS client sends its x-stainless-* headers (their names change between
            # versions); the origins are what is restricted, and a request still needs its key.
            allow_headers=["*"],
        )
    app.include_router(router)
    docs = docs_router() if config.docs else None
    if docs is not None:
        app.include_router(docs)
    app.include_router(page_router())
    return app
