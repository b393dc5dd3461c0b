"""The API's OpenAPI document, and interactive docs at ``/docs`` served from local files.

``/openapi.json`` is FastAPI's, made from the routes' declared models (:mod:`.protocol`), with what FastAPI
cannot know: wetqa answers an invalid request with 400 in OpenAI's shape (documented per route), never with
FastAPI's 422, and a stream's events are ChatCompletionChunk models, declared beside the others.

FastAPI's own ``/docs`` loads Swagger UI from a CDN; wetqa serves the same UI from the files of the
``swagger-ui-bundle-v2`` package (Swagger UI 5, which reads OpenAPI 3.1), with its start-up script a
file of its own, so the Content-Security-Policy still allows no inline script.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path
from typing import Any

from fastapi import APIRouter, FastAPI
from fastapi.openapi.utils import get_openapi
from fastapi.responses import Response
from pydantic import BaseModel
from pydantic.json_schema import models_json_schema

from .errors import APIError

REF = "#/components/schemas/{model}"
_COMPONENTS: list[type[BaseModel]] = []  # models a route refers to beside its response_model (stream chunks)


def component(model: type[BaseModel]) -> dict[str, str]:
    """A reference to ``model``'s schema among the document's components (added by :func:`openapi_schema`)."""
    if model not in _COMPONENTS:
        _COMPONENTS.append(model)
    return {"$ref": REF.format(model=model.__name__)}


def openapi_schema(app: FastAPI) -> dict[str, Any]:
    """The app's OpenAPI document (made once): FastAPI's, without the 422 wetqa never answers, with the
    schemas of :func:`component` models."""
    if app.openapi_schema is None:
        doc = get_openapi(title=app.title, version=app.version, description=app.description, routes=app.routes)
        for operation in (op for path in doc.get("paths", {}).values() for op in path.values()):
            operation.get("responses", {}).pop("422", None)
        schemas = doc.setdefault("components", {}).setdefault("schemas", {})
        for unused in ("HTTPValidationError", "ValidationError"):
            schemas.pop(unused, None)
        if _COMPONENTS:
            _, defs = models_json_schema([(m, "serialization") for m in _COMPONENTS], ref_template=REF)
            for name, schema in defs.get("$defs", {}).items():
                schemas.setdefault(name, schema)
        app.openapi_schema = doc
    return app.openapi_schema


# Swagger UI's files as the swagger-ui-bundle-v2 package ships them, and their media types.
_ASSETS = {
    "swagger-ui-bundle.js": "text/javascript; charset=utf-8",
    "swagger-ui.css": "text/css; charset=utf-8",
    "favicon-32x32.png": "image/png",
}
_PAGE = b"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>wetqa API</title>
<link rel="stylesheet" href="/docs/swagger-ui.css"><link rel="icon" href="/docs/favicon-32x32.png">
</head><body><div id="swagger-ui"></div>
<script src="/docs/swagger-ui-bundle.js"></script><script src="/docs/docs.js"></script>
</body></html>"""


class DocsFiles:
    """The docs page and its assets, read once."""

    def __init__(self, folder: Path):
        self.assets = {name: (folder.joinpath(name).read_bytes(), media) for name, media in _ASSETS.items()}
        self.assets["docs.js"] = (
            resources.files("wetqa.serve").joinpath("static", "docs.js").read_bytes(),
            "text/javascript; charset=utf-8",
        )

    async def page(self) -> Response:
        return Response(_PAGE, media_type="text/html; charset=utf-8")

    async def asset(self, name: str) -> Response:
        if name not in self.assets:
            raise APIError(404, f"no docs file {name!r}", code="not_found")
        body, media = self.assets[name]
        return Response(body, media_type=media, headers={"Cache-Control": "public, max-age=86400"})


def docs_router() -> APIRouter | None:
    """The ``/docs`` routes, or None (no docs) without the swagger-ui-bundle-v2 package."""
    try:
        from swagger_ui_bundle import swagger_ui_path
    except ImportError:
        return None
    files = DocsFiles(Path(swagger_ui_path))
    router = APIRouter(include_in_schema=False)
    router.add_api_route("/docs", files.page, methods=["GET"])
    router.add_api_route("/docs/{name}", files.asset, methods=["GET"])
    return router
