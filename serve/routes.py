"""The API's routes: each takes the chat service from ``app.state`` and declares its responses.

Each returns its body as a protocol model (:class:`~.responses.ModelResponse`); the declared
``response_model`` and error responses are what ``/openapi.json`` documents (:mod:`.docs`).
"""

from __future__ import annotations

from importlib import resources

from fastapi import APIRouter, Query, Request
from fastapi.responses import Response

from .docs import component
from .errors import error_responses
from .protocol import (
    ArticleVersions,
    ChatCompletion,
    ChatCompletionChunk,
    ChatRequest,
    ChunkResponse,
    Health,
    ModelCard,
    ModelList,
    SearchRequest,
    SearchResponse,
)
from .responses import ModelResponse
from .service import ChatService

router = APIRouter()


def service(request: Request) -> ChatService:
    return request.app.state.service


def client_of(request: Request) -> str:
    """Who asks, for the fair share of slots: the peer's address (uvicorn puts a trusted proxy's forwarded one)."""
    return request.client.host if request.client else ""


@router.post(
    "/v1/chat/completions",
    response_model=ChatCompletion,
    responses={
        200: {
            "description": "the answer (ChatCompletion), or with `stream: true` server-sent events of "
            "ChatCompletionChunk, the last ones carrying citations and sentences, then `data: [DONE]`",
            "content": {"text/event-stream": {"schema": component(ChatCompletionChunk)}},
        },
        **error_responses(400, 401, 404, 408, 413, 429, 502, 504),
    },
    summary="Answer the last user message with cited law articles",
)
async def chat_completions(req: ChatRequest, request: Request):
    return await service(request).chat(req, client_of(request), request.is_disconnected)


@router.post(
    "/v1/search",
    response_model=SearchResponse,
    responses=error_responses(400, 401, 404, 408, 413, 429, 504),
    summary="Retrieve law chunks for a query",
)
async def search(req: SearchRequest, request: Request):
    return await service(request).search(req, client_of(request), request.is_disconnected)


@router.get("/v1/models", response_model=ModelList, responses=error_responses(401))
async def models(request: Request):
    return ModelResponse(service(request).models())


@router.get(
    "/v1/models/{model:path}",
    response_model=ModelCard,
    responses=error_responses(401, 404),
    summary="One served pipeline, as GET /v1/models lists it (the openai client's models.retrieve)",
)
async def model(model: str, request: Request):
    return ModelResponse(service(request).model(model))


@router.get(
    "/v1/chunks/{chunk_id}",
    response_model=ChunkResponse,
    responses=error_responses(401, 404),
    summary="A chunk with its whole article (the page's source view)",
)
async def chunk(chunk_id: str, request: Request):
    return ModelResponse(service(request).chunks.describe(chunk_id))


@router.get(
    "/v1/articles/{law_id}/{article:path}/versions",
    response_model=ArticleVersions,
    responses=error_responses(400, 401, 404),
    summary="An article's versions in the index and the words that changed between two",
)
def article_versions(  # sync: FastAPI runs it in its thread pool (a store scan and a diff off the event loop)
    law_id: str,
    article: str,
    request: Request,
    since: str | None = Query(default=None, alias="from", description="compare from the version in force then"),
    until: str | None = Query(default=None, alias="to", description="compare to the version in force then"),
):
    return ModelResponse(service(request).chunks.versions(law_id, article, since, until))


@router.get("/health", response_model=Health)
async def health(request: Request):
    return ModelResponse(service(request).health())


class Page:
    """The web page and its script, shipped as package data and read once (a wheel serves them too)."""

    def __init__(self) -> None:
        static = resources.files("wetqa.serve").joinpath("static")
        self.html = static.joinpath("index.html").read_bytes()
        self.js = static.joinpath("app.js").read_bytes()

    async def page(self) -> Response:
        return Response(self.html, media_type="text/html; charset=utf-8")

    async def script(self) -> Response:
        return Response(self.js, media_type="text/javascript; charset=utf-8")

    async def icon(self) -> Response:
        # Browsers ask for /favicon.ico on every page load: an icon, not a 404 in every log.
        return Response(ICON, media_type="image/svg+xml", headers={"Cache-Control": "max-age=86400"})


# A section sign (§) on the page's blue: the icon of a page about law articles.
ICON = (
    b'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 32 32"><rect width="32" height="32" rx="6" '
    b'fill="#1f4e79"/><text x="16" y="24" font-size="22" text-anchor="middle" fill="#fff" '
    b'font-family="serif">\xc2\xa7</text></svg>'
)


def page_router() -> APIRouter:
    page = Page()
    r = APIRouter(include_in_schema=False)
    r.add_api_route("/", page.page, methods=["GET", "HEAD"])
    r.add_api_route("/static/app.js", page.script, methods=["GET", "HEAD"])
    r.add_api_route("/favicon.ico", page.icon, methods=["GET", "HEAD"])
    return r
