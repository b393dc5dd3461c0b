"""The OpenAI-compatible HTTP API and the web page.

``POST /v1/chat/completions`` answers the last user message with the pipeline
named by ``model`` (non-streaming, or server-sent events with ``stream``),
``GET /v1/models``, ``POST /v1/search``, ``GET /v1/chunks/{id}``,
``GET /health`` and the page at ``/``. Errors use OpenAI's error shape.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import secrets
import threading
import time
from collections.abc import Sequence
from importlib import resources
from typing import Literal

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response, StreamingResponse
from pydantic import BaseModel, Field
from starlette.exceptions import HTTPException as StarletteHTTPException

from wetqa.corpus.records import Chunk
from wetqa.generation import GenerationError
from wetqa.retrieval import RetrievalError, chunks_of

from .citing import cite
from .pipelines import ServedPipeline

try:
    import orjson
except ImportError:  # orjson comes with the [serve] extra; without it, the standard library's json
    orjson = None  # type: ignore[assignment]


def json_bytes(content) -> bytes:
    """Compact UTF-8 JSON: orjson when installed (about 10x faster on a 5 KB answer), else what Starlette renders."""
    if orjson is not None:
        return orjson.dumps(content)
    return json.dumps(content, ensure_ascii=False, allow_nan=False, separators=(",", ":")).encode("utf-8")


class FastJSONResponse(JSONResponse):
    def render(self, content) -> bytes:
        return json_bytes(content)


class APIError(Exception):
    def __init__(
        self,
        status: int,
        message: str,
        type_: str = "invalid_request_error",
        code: str | None = None,
        param: str | None = None,
    ):
        self.status, self.message, self.type, self.code, self.param = status, message, type_, code, param


def error_body(message: str, type_: str, code: str | None = None, param: str | None = None) -> dict:
    return {"error": {"message": message, "type": type_, "param": param, "code": code}}


class Message(BaseModel):
    role: Literal["system", "user", "assistant", "tool", "developer"]
    content: str | list[dict] | None = None


class ChatRequest(BaseModel):
    model: str
    messages: list[Message] = Field(min_length=1)
    stream: bool = False
    temperature: float | None = None
    max_tokens: int | None = Field(default=None, ge=1)
    n: int | None = Field(default=None, ge=1, le=1)
    user: str | None = None


class SearchRequest(BaseModel):
    query: str
    model: str | None = None
    k: int = Field(default=10, ge=1, le=100)


def _text_of(content) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    return " ".join(part.get("text", "") for part in content if isinstance(part, dict) and part.get("type") == "text")


class GuardMiddleware:
    """API key and body-size checks for ``/v1/`` as plain ASGI (Starlette's BaseHTTPMiddleware costs more per request)."""

    def __init__(self, app, api_key: str | None, max_body_bytes: int):
        self.app, self.api_key, self.max_body_bytes = app, api_key, max_body_bytes

    async def __call__(self, scope, receive, send):
        if scope["type"] == "http" and scope["path"].startswith("/v1/"):
            headers = dict(scope["headers"])
            if self.api_key is not None:
                auth = headers.get(b"authorization", b"").decode("latin-1")
                token = auth[7:] if auth.lower().startswith("bearer ") else ""
                if not secrets.compare_digest(token.encode(), self.api_key.encode()):
                    return await self._error(
                        send,
                        401,
                        "missing or wrong API key (Authorization: Bearer ...)",
                        "authentication_error",
                        "invalid_api_key",
                    )
            length = headers.get(b"content-length", b"")
            if length.isdigit() and int(length) > self.max_body_bytes:
                return await self._error(
                    send,
                    413,
                    f"request body of {int(length)} bytes is over the {self.max_body_bytes} byte limit",
                    "invalid_request_error",
                    "request_too_large",
                )
        await self.app(scope, receive, send)

    @staticmethod
    async def _error(send, status: int, message: str, type_: str, code: str) -> None:
        body = json.dumps(error_body(message, type_, code)).encode()
        await send(
            {
                "type": "http.response.start",
                "status": status,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())],
            }
        )
        await send({"type": "http.response.body", "body": body})


def create_app(
    presets: Sequence[ServedPipeline],
    api_key: str | None = None,
    max_concurrency: int = 16,
    max_question_chars: int = 2000,
    max_body_bytes: int = 1_000_000,
    timeout: float = 120.0,
) -> FastAPI:
    if not presets:
        raise ValueError("the server needs at least one preset")
    by_name = {p.name: p for p in presets}
    for p in presets:
        if p.pipeline is None:
            p.load()
    default = presets[0]
    # For the page's source view: chunk id -> (preset, chunk) and each article's parts, built once
    # here rather than scanned per request. The first preset that holds an id answers for it.
    chunk_by_id: dict[str, tuple[int, Chunk]] = {}
    article_parts: dict[tuple, list] = {}
    for n, p in enumerate(presets):
        for c in chunks_of(p.loaded.retriever):
            article_parts.setdefault((n, c.bwb_id, c.version_date, c.article), []).append(c)
            chunk_by_id.setdefault(c.id, (n, c))
    slots = threading.BoundedSemaphore(max_concurrency)
    # Completion ids: unique per server run without a urandom call per request.
    id_prefix, id_counter = secrets.token_hex(8), itertools.count(1)

    app = FastAPI(
        title="wetqa",
        version="0.1.0",
        description="Attributed question answering over Dutch law, with an OpenAI-compatible API.",
    )

    @app.exception_handler(APIError)
    async def _api_error(_: Request, exc: APIError):
        return JSONResponse(error_body(exc.message, exc.type, exc.code, exc.param), status_code=exc.status)

    @app.exception_handler(RequestValidationError)
    async def _validation(_: Request, exc: RequestValidationError):
        first = exc.errors()[0] if exc.errors() else {}
        where = ".".join(str(x) for x in first.get("loc", []) if x != "body")
        return JSONResponse(
            error_body(
                f"invalid request: {where}: {first.get('msg', 'bad value')}",
                "invalid_request_error",
                "invalid_request",
                where or None,
            ),
            status_code=422,
        )

    @app.exception_handler(StarletteHTTPException)
    async def _http(_: Request, exc: StarletteHTTPException):
        return JSONResponse(
            error_body(str(exc.detail), "invalid_request_error", str(exc.status_code)), status_code=exc.status_code
        )

    @app.exception_handler(Exception)
    async def _unexpected(_: Request, exc: Exception):
        return JSONResponse(
            error_body(f"internal error: {type(exc).__name__}", "server_error", "internal_error"), status_code=500
        )

    app.add_middleware(GuardMiddleware, api_key=api_key, max_body_bytes=max_body_bytes)

    def preset_for(name: str | None) -> ServedPipeline:
        if name is None:
            return default
        if name not in by_name:
            raise APIError(
                400, f"unknown model {name!r}; available: {', '.join(by_name)}", code="model_not_found", param="model"
            )
        return by_name[name]

    def question_of(req: ChatRequest) -> str:
        users = [m for m in req.messages if m.role == "user"]
        if not users:
            raise APIError(400, "no user message: the last user message is the question", param="messages")
        q = _text_of(users[-1].content).strip()
        if not q:
            raise APIError(400, "the question (last user message) is empty", param="messages")
        if len(q) > max_question_chars:
            raise APIError(
                413,
                f"the question has {len(q)} characters; the limit is {max_question_chars}",
                code="question_too_long",
            )
        return q

    async def run_limited(fn, *args, inline: bool = False):
        if not slots.acquire(blocking=False):
            raise APIError(
                429,
                f"too many requests in progress (limit {max_concurrency}); retry shortly",
                "rate_limit_error",
                "concurrency_limit",
            )
        try:
            if inline:
                # Model-free work of about a millisecond: a thread hop would cost as much as the work.
                return fn(*args)
            task = asyncio.get_running_loop().run_in_executor(None, fn, *args)
            try:
                return await asyncio.wait_for(asyncio.shield(task), timeout)
            except TimeoutError:
                raise APIError(
                    504, f"the model did not answer within {timeout:.0f} s", "timeout_error", "upstream_timeout"
                ) from None
        finally:
            slots.release()

    def answer_question(preset: ServedPipeline, question: str):
        try:
            answer = preset.loaded.ask(question)
        except (GenerationError, RetrievalError) as exc:
            msg = str(exc)
            if "timed out" in msg:
                raise APIError(504, msg, "timeout_error", "upstream_timeout") from None
            if "context overflow" in msg:
                raise APIError(400, msg, code="context_length_exceeded") from None
            raise APIError(502, msg, "upstream_error", "upstream_error") from None
        return answer, cite(answer)

    @app.get("/health")
    async def health():
        return {"status": "ok", "models": list(by_name)}

    @app.get("/v1/models")
    async def models():
        return {"object": "list", "data": [p.describe() for p in presets]}

    @app.post("/v1/search")
    async def search(req: SearchRequest):
        preset = preset_for(req.model)
        if not req.query.strip():
            raise APIError(400, "empty query", param="query")
        if len(req.query) > max_question_chars:
            raise APIError(
                413,
                f"the query has {len(req.query)} characters; the limit is {max_question_chars}",
                code="question_too_long",
            )
        hits = await run_limited(preset.loaded.retriever.search, req.query, req.k, inline=preset.inline)
        return FastJSONResponse({"object": "list", "model": preset.name, "data": [h.to_json() for h in hits]})

    @app.get("/v1/chunks/{chunk_id}")
    async def chunk(chunk_id: str):
        """A chunk with its whole article (all chunks of that article), for the page's source view."""
        if chunk_id in chunk_by_id:
            n, target = chunk_by_id[chunk_id]
            parts = article_parts[(n, target.bwb_id, target.version_date, target.article)]
            return {
                "id": target.id,
                "doc_id": target.doc_id,
                "bwb_id": target.bwb_id,
                "law": target.law,
                "article": target.article,
                "path": target.path_label,
                "text": target.text,
                "article_text": "\n".join(c.text for c in sorted(parts, key=lambda c: c.part)),
            }
        raise APIError(404, f"no chunk {chunk_id!r}", code="not_found")

    @app.post("/v1/chat/completions")
    async def chat(req: ChatRequest):
        preset = preset_for(req.model)
        question = question_of(req)
        answer, cited = await run_limited(answer_question, preset, question, inline=preset.inline)
        content = cited.answer + (f"\n\n{cited.references}" if cited.references else "")
        usage = answer.usage.to_json()
        if usage["total_tokens"] == 0:  # the extractive backend has no tokenizer: count words
            usage = {
                "prompt_tokens": len(question.split()),
                "completion_tokens": len(content.split()),
                "total_tokens": len(question.split()) + len(content.split()),
            }
        cid = f"chatcmpl-{id_prefix}{next(id_counter):08x}"
        created = int(time.time())
        extra = {"citations": cited.citations, "sentences": cited.sentences}
        if not req.stream:
            # A JSONResponse of plain data skips FastAPI's jsonable_encoder walk over the nested citations.
            return FastJSONResponse(
                {
                    "id": cid,
                    "object": "chat.completion",
                    "created": created,
                    "model": preset.name,
                    "choices": [
                        {
                            "index": 0,
                            "message": {"role": "assistant", "content": content},
                            "finish_reason": "stop",
                            "logprobs": None,
                        }
                    ],
                    "usage": usage,
                    **extra,
                }
            )

        def chunk(delta: dict, finish: str | None = None, **more) -> str:
            body = {
                "id": cid,
                "object": "chat.completion.chunk",
                "created": created,
                "model": preset.name,
                "choices": [{"index": 0, "delta": delta, "finish_reason": finish, "logprobs": None}],
                **more,
            }
            return f"data: {json_bytes(body).decode()}\n\n"

        async def events():
            yield chunk({"role": "assistant", "content": ""})
            pieces = content.split(" ")
            for i in range(0, len(pieces), 8):  # a few words per event
                text = " ".join(pieces[i : i + 8])
                yield chunk({"content": text if i == 0 else " " + text})
            yield chunk({}, "stop", usage=usage, **extra)
            yield "data: [DONE]\n\n"

        return StreamingResponse(events(), media_type="text/event-stream", headers={"Cache-Control": "no-cache"})

    # The page ships as package data: read once through importlib.resources, so an installed
    # wheel serves it as well as a checkout does.
    page_html = resources.files("wetqa.serve").joinpath("static", "index.html").read_bytes()

    @app.get("/", include_in_schema=False)
    async def page():
        return Response(page_html, media_type="text/html; charset=utf-8")

    return app
