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
import re
import secrets
import threading
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from importlib import resources
from typing import Literal

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response, StreamingResponse
from pydantic import BaseModel, Field, StrictStr
from starlette.exceptions import HTTPException as StarletteHTTPException

from wetqa.corpus.records import Chunk
from wetqa.generation import (
    Answer,
    AsyncStreamingBackend,
    GenerationError,
    Sampling,
    UnsupportedSetting,
    check_sampling,
)
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


class ClosingStreamingResponse(StreamingResponse):
    """A streaming response that runs ``on_close`` however it ends: sent, failed, or left by the client
    (even before its first byte, when the body iterator never starts and its own ``finally`` would not run)."""

    def __init__(self, content, on_close, **kwargs):
        super().__init__(content, **kwargs)
        self._on_close = on_close

    async def __call__(self, scope, receive, send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            await self._on_close()


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


_URL = re.compile(r"\b(?:https?|wss?)://[^\s)\]'\"]+")


def error_body(message: str, type_: str, code: str | None = None, param: str | None = None) -> dict:
    return {"error": {"message": message, "type": type_, "param": param, "code": code}}


class TextPart(BaseModel):
    type: Literal["text"]
    text: StrictStr


class Message(BaseModel):
    role: Literal["system", "user", "assistant", "tool", "developer"]
    content: StrictStr | list[TextPart] | None = None


class StreamOptions(BaseModel):
    include_usage: bool = False


class ChatRequest(BaseModel):
    model: str
    messages: list[Message] = Field(min_length=1)
    stream: bool = False
    stream_options: StreamOptions | None = None
    temperature: float | None = Field(default=None, ge=0, le=2)
    max_tokens: int | None = Field(default=None, ge=1)
    max_completion_tokens: int | None = Field(default=None, ge=1)
    n: int | None = Field(default=None, ge=1)
    seed: int | None = None
    stop: str | list[str] | None = None
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
    return " ".join(part.text for part in content)


# No inline script anywhere (the page loads /static/app.js); styles may be inline.
# How many pieces a worker thread may stream ahead of what has been sent to the client.
STREAM_WINDOW = 64

SECURITY_HEADERS = [
    (
        b"content-security-policy",
        b"default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data:; "
        b"connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'",
    ),
    (b"x-content-type-options", b"nosniff"),
    (b"x-frame-options", b"DENY"),
    (b"referrer-policy", b"no-referrer"),
]


class GuardMiddleware:
    """API key, body size and security headers as plain ASGI (Starlette's BaseHTTPMiddleware costs more per request).

    The body limit counts the bytes actually received: a chunked upload has no Content-Length to trust.
    """

    def __init__(self, app, api_key: str | None, max_body_bytes: int, body_timeout: float = 30.0):
        self.app, self.api_key, self.max_body_bytes = app, api_key, max_body_bytes
        self.body_timeout = body_timeout

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)

        async def send_secured(message):
            if message["type"] == "http.response.start":
                message = {**message, "headers": [*message.get("headers", []), *SECURITY_HEADERS]}
            await send(message)

        if scope["path"].startswith("/v1/") and scope["method"] != "OPTIONS":
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
            if scope["method"] in ("POST", "PUT", "PATCH"):
                # Read the body here, stopping at the limit, and hand the app what was read.
                # Within one deadline for the whole body: a client that trickles it in holds a slot.
                chunks, size, more = [], 0, True
                loop = asyncio.get_running_loop()
                deadline = loop.time() + self.body_timeout
                while more:
                    try:
                        message = await asyncio.wait_for(receive(), max(0.0, deadline - loop.time()))
                    except TimeoutError:
                        return await self._error(
                            send,
                            408,
                            f"the request body did not arrive within {self.body_timeout:g} s",
                            "invalid_request_error",
                            "request_timeout",
                            close=True,
                        )
                    if message["type"] == "http.disconnect":
                        return
                    chunk = message.get("body", b"")
                    size += len(chunk)
                    if size > self.max_body_bytes:
                        return await self._error(
                            send,
                            413,
                            f"request body is over the {self.max_body_bytes} byte limit",
                            "invalid_request_error",
                            "request_too_large",
                        )
                    chunks.append(chunk)
                    more = message.get("more_body", False)
                body = b"".join(chunks)
                sent = False

                async def replay():
                    nonlocal sent
                    if not sent:
                        sent = True
                        return {"type": "http.request", "body": body, "more_body": False}
                    return await receive()

                return await self.app(scope, replay, send_secured)
        await self.app(scope, receive, send_secured)

    @staticmethod
    async def _error(send, status: int, message: str, type_: str, code: str, close: bool = False) -> None:
        body = json.dumps(error_body(message, type_, code)).encode()
        await send(
            {
                "type": "http.response.start",
                "status": status,
                "headers": [
                    (b"content-type", b"application/json"),
                    (b"content-length", str(len(body)).encode()),
                    *([(b"connection", b"close")] if close else []),
                    *SECURITY_HEADERS,
                ],
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
    cors_origins: Sequence[str] = (),
    body_timeout: float = 30.0,
    docs: bool = True,
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
    # A thread for every slot: asyncio's default pool has cpu_count + 4 threads (6 on 2 cores), which
    # would cap concurrent upstream calls below the limit, and leave fewer queries to batch together.
    workers = ThreadPoolExecutor(max_concurrency, thread_name_prefix="wetqa-worker")
    # Completion ids: unique per server run without a urandom call per request.
    id_prefix, id_counter = secrets.token_hex(8), itertools.count(1)

    app = FastAPI(
        title="wetqa",
        version="0.1.0",
        description="Attributed question answering over Dutch law, with an OpenAI-compatible API.",
        # FastAPI's own /docs loads Swagger UI from a CDN: off. wetqa serves the same UI from the files
        # of the swagger-ui-bundle-v2 package instead (see offline_docs), so nothing reaches outside.
        docs_url=None,
        redoc_url=None,
    )

    @app.exception_handler(APIError)
    async def _api_error(_: Request, exc: APIError):
        return JSONResponse(error_body(exc.message, exc.type, exc.code, exc.param), status_code=exc.status)

    @app.exception_handler(RequestValidationError)
    async def _validation(_: Request, exc: RequestValidationError):
        # Of a union's errors (content: a string, or a list of parts) the deepest names the real problem.
        first = max(exc.errors(), key=lambda e: len(e.get("loc", ()))) if exc.errors() else {}
        where = ".".join(str(x) for x in first.get("loc", []) if x != "body")
        msg = first.get("msg", "bad value")
        if where.endswith(".text") and "string" in msg:
            msg = "a text part's text must be a string"
        # OpenAI answers an invalid request with 400 (FastAPI's default would be 422).
        return JSONResponse(
            error_body(f"invalid request: {where}: {msg}", "invalid_request_error", "invalid_request", where or None),
            status_code=400,
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

    app.add_middleware(GuardMiddleware, api_key=api_key, max_body_bytes=max_body_bytes, body_timeout=body_timeout)
    if cors_origins:
        from starlette.middleware.cors import CORSMiddleware

        # Outside the guard: a browser's preflight carries no key and must still be answered.
        app.add_middleware(
            CORSMiddleware,
            allow_origins=list(cors_origins),
            allow_methods=["GET", "POST", "OPTIONS"],
            allow_headers=["authorization", "content-type"],
        )

    def preset_for(name: str | None) -> ServedPipeline:
        if name is None:
            return default
        if name not in by_name:
            raise APIError(
                404,
                f"the model {name!r} does not exist; available: {', '.join(by_name)}",
                code="model_not_found",
                param="model",
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

    def take_slot() -> None:
        if not slots.acquire(blocking=False):
            raise APIError(
                429,
                f"too many requests in progress (limit {max_concurrency}); retry shortly",
                "rate_limit_error",
                "concurrency_limit",
            )

    def too_slow() -> APIError:
        return APIError(504, f"the model did not answer within {timeout:g} s", "timeout_error", "upstream_timeout")

    async def run_limited(fn, *args, inline: bool = False):
        take_slot()
        if inline:
            # Model-free work of about a millisecond: a thread hop would cost as much as the work.
            try:
                return fn(*args)
            finally:
                slots.release()

        def work():
            # The slot is given back when the work ends, not when the client stops waiting for it:
            # after a 504 the thread is still generating, and the limit must count it.
            try:
                return fn(*args)
            finally:
                slots.release()

        task = asyncio.get_running_loop().run_in_executor(workers, work)
        try:
            return await asyncio.wait_for(asyncio.shield(task), timeout)
        except TimeoutError:
            raise too_slow() from None

    def upstream_error(exc: GenerationError | RetrievalError) -> APIError:
        if isinstance(exc, UnsupportedSetting):
            return APIError(400, str(exc), code="unsupported_parameter", param=exc.setting)
        # Clients are told what went wrong, not where the server's upstreams live.
        msg = _URL.sub("the upstream model server", str(exc))
        if "timed out" in msg:
            return APIError(504, msg, "timeout_error", "upstream_timeout")
        if "context overflow" in msg:
            return APIError(400, msg, code="context_length_exceeded")
        return APIError(502, msg, "upstream_error", "upstream_error")

    def answer_question(preset: ServedPipeline, question: str, sampling: Sampling):
        try:
            answer = preset.loaded.ask(question, sampling)
        except (GenerationError, RetrievalError) as exc:
            raise upstream_error(exc) from None
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

    def sampling_of(req: ChatRequest, preset: ServedPipeline) -> Sampling:
        if req.n is not None and req.n > 1:
            raise APIError(400, "n > 1 is not supported: one answer per request", param="n")
        if req.max_tokens is not None and req.max_completion_tokens is not None:
            if req.max_tokens != req.max_completion_tokens:
                raise APIError(400, "max_tokens and max_completion_tokens differ; give one of them", param="max_tokens")
        stops = (req.stop,) if isinstance(req.stop, str) else tuple(req.stop or ())
        if len(stops) > 4 or any(not s for s in stops):
            raise APIError(400, "stop takes up to 4 non-empty strings", param="stop")
        sampling = Sampling(
            temperature=req.temperature,
            max_tokens=req.max_completion_tokens if req.max_completion_tokens is not None else req.max_tokens,
            stop=stops,
            seed=req.seed,
        )
        try:
            check_sampling(preset.loaded.backend, sampling)
        except UnsupportedSetting as exc:
            param = exc.setting
            if param == "max_tokens" and req.max_completion_tokens is not None:
                param = "max_completion_tokens"
            raise APIError(
                400, str(exc).replace(exc.setting, param, 1), code="unsupported_parameter", param=param
            ) from None
        return sampling

    def word_usage(answer: Answer, question: str, content: str) -> dict:
        usage = answer.usage.to_json()
        if usage["total_tokens"] == 0:  # the extractive backend has no tokenizer: count words
            usage = {
                "prompt_tokens": len(question.split()),
                "completion_tokens": len(content.split()),
                "total_tokens": len(question.split()) + len(content.split()),
            }
        return usage

    @app.post("/v1/chat/completions")
    async def chat(req: ChatRequest):
        preset = preset_for(req.model)
        sampling = sampling_of(req, preset)
        question = question_of(req)
        cid = f"chatcmpl-{id_prefix}{next(id_counter):08x}"
        created = int(time.time())
        if req.stream:
            return await stream_chat(preset, question, sampling, cid, created, req)
        answer, cited = await run_limited(answer_question, preset, question, sampling, inline=preset.inline)
        content = cited.answer + (f"\n\n{cited.references}" if cited.references else "")
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
                        "finish_reason": answer.finish_reason,
                        "logprobs": None,
                    }
                ],
                "usage": word_usage(answer, question, content),
                "citations": cited.citations,
                "sentences": cited.sentences,
            }
        )

    async def stream_chat(
        preset: ServedPipeline, question: str, sampling: Sampling, cid: str, created: int, req: ChatRequest
    ) -> StreamingResponse:
        """Server-sent events with the answer's text as the backend produces it.

        A backend that streams over HTTP (openai: a ``vllm serve`` upstream) is read on the event
        loop; any other runs in a worker thread that hands each piece over. The first piece is awaited
        before the response starts, so what fails early (retrieval, an upstream that refuses) still
        gets its HTTP status. Citations and the source list come in the last chunks. When the client
        goes away the work ends (the upstream's stream is closed, or the thread stops at its next
        token) and only then is the slot given back.
        """
        take_slot()
        pipeline = preset.loaded
        timed_out = ("error", too_slow())

        def failure(exc: BaseException) -> tuple:
            if isinstance(exc, (GenerationError, RetrievalError)):
                return ("error", upstream_error(exc))
            return ("error", APIError(500, f"internal error: {type(exc).__name__}", "server_error", "internal_error"))

        if isinstance(pipeline.backend, AsyncStreamingBackend):
            released = False

            def release() -> None:
                nonlocal released
                if not released:
                    released = True
                    slots.release()

            try:
                if preset.inline_retrieval:
                    request = pipeline.prepare(question, sampling)
                else:
                    request = await asyncio.get_running_loop().run_in_executor(
                        workers, pipeline.prepare, question, sampling
                    )
            except (GenerationError, RetrievalError) as exc:
                release()
                raise upstream_error(exc) from None
            except BaseException:
                release()
                raise
            pieces = pipeline.astream_request(request)

            async def next_event() -> tuple:
                try:
                    return ("item", await asyncio.wait_for(anext(pieces), timeout))
                except StopAsyncIteration:
                    return ("end", None)
                except TimeoutError:
                    return timed_out
                except Exception as exc:  # noqa: BLE001 - reported to the client
                    return failure(exc)

            async def close() -> None:
                try:
                    await pieces.aclose()
                finally:
                    release()

        else:
            loop = asyncio.get_running_loop()
            queue: asyncio.Queue = asyncio.Queue()
            leave = threading.Event()
            # Back-pressure: the worker may run at most STREAM_WINDOW pieces ahead of what the client
            # has been sent. Without it a fast local model writes its whole answer into the queue before
            # the server has even noticed that the client left, and the stop-on-leave never happens.
            room = threading.Semaphore(STREAM_WINDOW)

            def hand_over(kind: str, item) -> None:
                try:
                    loop.call_soon_threadsafe(queue.put_nowait, (kind, item))
                except RuntimeError:  # the loop has closed (server shutting down): nobody is listening
                    leave.set()

            def wait_for_room() -> bool:
                # A client that stops reading for the whole timeout loses its stream's work (and slot).
                waited = 0.0
                while not room.acquire(timeout=0.1):
                    waited += 0.1
                    if leave.is_set() or waited >= timeout:
                        return False
                return not leave.is_set()

            def work() -> None:
                try:
                    items = pipeline.stream(question, sampling)
                    try:
                        for item in items:
                            if not wait_for_room():
                                leave.set()
                                break
                            hand_over("item", item)
                    finally:
                        items.close()
                    hand_over("end", None)
                except Exception as exc:  # noqa: BLE001 - reported to the client
                    hand_over(*failure(exc))
                finally:
                    slots.release()  # when the work has ended, not when the client stopped waiting

            try:
                loop.run_in_executor(workers, work)
            except BaseException:
                slots.release()
                raise

            async def next_event() -> tuple:
                try:
                    got = await asyncio.wait_for(queue.get(), timeout)
                except TimeoutError:
                    leave.set()
                    return timed_out
                room.release()
                return got

            async def close() -> None:
                leave.set()  # the worker stops at its next piece
                room.release()  # and does not wait for room to find that out

        first = await next_event()
        if first[0] == "error":
            await close()
            raise first[1]

        def event(delta: dict, finish: str | None = None, **more) -> str:
            body = {
                "id": cid,
                "object": "chat.completion.chunk",
                "created": created,
                "model": preset.name,
                "choices": [{"index": 0, "delta": delta, "finish_reason": finish, "logprobs": None}],
                **more,
            }
            return f"data: {json_bytes(body).decode()}\n\n"

        include_usage = bool(req.stream_options and req.stream_options.include_usage)

        async def events():
            sent: list[str] = []
            kind, item = first
            yield event({"role": "assistant", "content": ""})
            while kind == "item":
                if isinstance(item, Answer):
                    for line in final_events(item, "".join(sent)):
                        yield line
                else:
                    sent.append(item)
                    yield event({"content": item})
                # A turn of the event loop between events: if the client has gone, the server learns it
                # here (and sends nothing more) instead of writing every remaining event to a dead socket,
                # which asyncio logs as "socket.send() raised exception." per write.
                await asyncio.sleep(0)
                kind, item = await next_event()
            if kind == "error":
                # Mid-stream the status line has gone: the error travels as an event, as OpenAI's does.
                yield f"data: {json_bytes(error_body(item.message, item.type, item.code, item.param)).decode()}\n\n"
            yield "data: [DONE]\n\n"

        def final_events(answer: Answer, streamed: str) -> list[str]:
            cited = cite(answer)
            tail = f"\n\n{cited.references}" if cited.references else ""
            out = [event({"content": tail})] if tail else []
            usage = word_usage(answer, question, streamed + tail)
            extra = {"citations": cited.citations, "sentences": cited.sentences}
            if not include_usage:
                return [*out, event({}, answer.finish_reason, usage=usage, **extra)]
            # As OpenAI does: the usage in a chunk of its own, with no choices, after the last one.
            body = {
                "id": cid,
                "object": "chat.completion.chunk",
                "created": created,
                "model": preset.name,
                "choices": [],
                "usage": usage,
            }
            return [*out, event({}, answer.finish_reason, **extra), f"data: {json_bytes(body).decode()}\n\n"]

        return ClosingStreamingResponse(
            events(), on_close=close, media_type="text/event-stream", headers={"Cache-Control": "no-cache"}
        )

    # The page ships as package data: read once through importlib.resources, so an installed
    # wheel serves it as well as a checkout does.
    page_html = resources.files("wetqa.serve").joinpath("static", "index.html").read_bytes()

    page_js = resources.files("wetqa.serve").joinpath("static", "app.js").read_bytes()

    if docs:
        offline_docs(app)

    @app.get("/", include_in_schema=False)
    async def page():
        return Response(page_html, media_type="text/html; charset=utf-8")

    @app.get("/static/app.js", include_in_schema=False)
    async def page_script():
        return Response(page_js, media_type="text/javascript; charset=utf-8")

    return app


# Swagger UI's files as the swagger-ui-bundle-v2 package ships them (Swagger UI 5: OpenAPI 3.1), and their media types.
_DOCS_ASSETS = {
    "swagger-ui-bundle.js": "text/javascript; charset=utf-8",
    "swagger-ui.css": "text/css; charset=utf-8",
    "favicon-32x32.png": "image/png",
}
_DOCS_PAGE = b"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>wetqa API</title>
<link rel="stylesheet" href="/docs/swagger-ui.css"><link rel="icon" href="/docs/favicon-32x32.png">
</head><body><div id="swagger-ui"></div>
<script src="/docs/swagger-ui-bundle.js"></script><script src="/docs/docs.js"></script>
</body></html>"""


def offline_docs(app: FastAPI) -> bool:
    """Interactive API docs at ``/docs`` from local files; False (and no /docs) without swagger-ui-bundle-v2."""
    try:
        from swagger_ui_bundle import swagger_ui_path
    except ImportError:
        return False
    from pathlib import Path

    folder = Path(swagger_ui_path)
    assets = {name: (folder.joinpath(name).read_bytes(), media) for name, media in _DOCS_ASSETS.items()}
    assets["docs.js"] = (
        resources.files("wetqa.serve").joinpath("static", "docs.js").read_bytes(),
        "text/javascript; charset=utf-8",
    )

    @app.get("/docs", include_in_schema=False)
    async def docs_page():
        return Response(_DOCS_PAGE, media_type="text/html; charset=utf-8")

    @app.get("/docs/{name}", include_in_schema=False)
    async def docs_asset(name: str):
        if name not in assets:
            raise APIError(404, f"no docs file {name!r}", code="not_found")
        body, media = assets[name]
        return Response(body, media_type=media, headers={"Cache-Control": "public, max-age=86400"})

    return True
