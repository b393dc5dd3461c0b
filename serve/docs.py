"""Interactive API docs at ``/docs``, served from local files (nothing is loaded from a CDN).

FastAPI's own ``/docs`` loads Swagger UI from a CDN; wetqa serves the same UI from the files of the
``swagger-ui-bundle-v2`` package (Swagger UI 5, which reads OpenAPI 3.1), with its start-up script a
file of its own, so the Content-Security-Policy still allows no inline script.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path

from fastapi import APIRouter
from fastapi.responses import Response

from .errors import APIError

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
