"""Errors as OpenAI shapes them: ``{"error": {"message", "type", "param", "code"}}`` with an HTTP status."""

from __future__ import annotations

import re
from http import HTTPStatus

from fastapi import Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import Response
from starlette.exceptions import HTTPException as StarletteHTTPException

from wetqa.generation import ContextOverflowError, GenerationError, UnsupportedSetting, UpstreamTimeout
from wetqa.retrieval import RetrievalError

from .protocol import ErrorDetail, ErrorResponse
from .responses import ModelResponse

_URL = re.compile(r"\b(?:https?|wss?)://[^\s)\]'\"]+")


class APIError(Exception):
    def __init__(
        self,
        status: int,
        message: str,
        type_: str = "invalid_request_error",
        code: str | None = None,
        param: str | None = None,
        headers: dict[str, str] | None = None,
    ):
        self.status, self.message, self.type, self.code, self.param = status, message, type_, code, param
        self.headers = headers  # sent with the error (a 429's Retry-After)

    def body(self) -> ErrorResponse:
        return error_body(self.message, self.type, self.code, self.param)


def error_body(message: str, type_: str, code: str | None = None, param: str | None = None) -> ErrorResponse:
    return ErrorResponse(error=ErrorDetail(message=message, type=type_, param=param, code=code))


def upstream_error(exc: GenerationError | RetrievalError) -> APIError:
    """What a failed retrieval or generation means for the client (never where the upstream lives)."""
    if isinstance(exc, UnsupportedSetting):
        return APIError(400, str(exc), code="unsupported_parameter", param=exc.setting)
    msg = _URL.sub("the upstream model server", str(exc))
    if isinstance(exc, UpstreamTimeout):
        return APIError(504, msg, "timeout_error", "upstream_timeout")
    if isinstance(exc, ContextOverflowError):
        return APIError(400, msg, code="context_length_exceeded")
    return APIError(502, msg, "upstream_error", "upstream_error")


def internal_error(exc: BaseException) -> APIError:
    return APIError(500, f"internal error: {type(exc).__name__}", "server_error", "internal_error")


async def on_api_error(_: Request, exc: Exception) -> ModelResponse:
    assert isinstance(exc, APIError)
    return ModelResponse(exc.body(), status_code=exc.status, headers=exc.headers)


def _member_tag(part: object) -> bool:
    """pydantic's name for a union member or validator in a location (``function-after[_unicode(), str]``,
    ``list[TextPart]``): not a field a client wrote."""
    return isinstance(part, str) and any(c in part for c in "[](),")


async def on_validation_error(_: Request, exc: Exception) -> ModelResponse:
    assert isinstance(exc, RequestValidationError)
    # Of a union's errors (content: a string, or a list of parts) the deepest names the real problem.
    first = max(exc.errors(), key=lambda e: len(e.get("loc", ()))) if exc.errors() else {}
    if first.get("type") == "json_invalid":  # its location is a character offset in the body, not a field
        reason = (first.get("ctx") or {}).get("error", "")
        return ModelResponse(
            error_body(
                f"invalid request: the body is not valid JSON{f' ({reason})' if reason else ''}",
                "invalid_request_error",
                "invalid_request",
            ),
            status_code=400,
        )
    where = ".".join(str(x) for x in first.get("loc", []) if x != "body" and not _member_tag(x))
    msg = first.get("msg", "bad value")
    if where.endswith(".text") and "string" in msg:
        msg = "a text part's text must be a string"
    if not where and first.get("type") in ("model_attributes_type", "dict_type", "missing"):  # the body itself
        msg = "the body must be a JSON object"
    # OpenAI answers an invalid request with 400 (FastAPI's default would be 422).
    return ModelResponse(
        error_body(
            f"invalid request: {f'{where}: ' if where else ''}{msg}",
            "invalid_request_error",
            "invalid_request",
            where or None,
        ),
        status_code=400,
    )


def status_code_name(status: int) -> str:
    """An HTTP status as an error code in the style of the app's own (404 -> ``not_found``, 405 ->
    ``method_not_allowed``), so a client reads one kind of code whether a route or the router answered."""
    try:
        return re.sub(r"\W+", "_", HTTPStatus(status).phrase.lower()).strip("_")
    except ValueError:
        return f"http_{status}"


async def on_http_error(_: Request, exc: Exception) -> ModelResponse:
    assert isinstance(exc, StarletteHTTPException)
    return ModelResponse(
        error_body(str(exc.detail), "invalid_request_error", status_code_name(exc.status_code)),
        status_code=exc.status_code,
        headers=exc.headers,  # a 405's Allow: the methods the route takes (RFC 9110 says it must be sent)
    )


async def on_unexpected(_: Request, exc: Exception) -> ModelResponse:
    return ModelResponse(internal_error(exc).body(), status_code=500)


class ClientGone(Exception):
    """The client disconnected before its answer: its work was cancelled and nothing is sent."""


async def on_client_gone(request: Request, exc: Exception) -> Response:
    # 499 (nginx's "client closed request"): for the access log only; nobody reads it.
    return Response(status_code=499)


HANDLERS = (
    (ClientGone, on_client_gone),
    (APIError, on_api_error),
    (RequestValidationError, on_validation_error),
    (StarletteHTTPException, on_http_error),
    (Exception, on_unexpected),
)


def error_responses(*statuses: int) -> dict:
    """OpenAPI ``responses=`` entries documenting error statuses with the error shape."""
    described = {
        400: "invalid request, or a setting the generator cannot honour (code unsupported_parameter)",
        401: "missing or wrong API key",
        404: "unknown model (code model_not_found) or id",
        408: "the request body did not arrive within --body-timeout",
        413: "request body or question too large",
        429: "over the concurrency limit; retry shortly",
        502: "the upstream model server failed",
        504: "no answer within --request-timeout",
    }
    return {s: {"model": ErrorResponse, "description": described[s]} for s in statuses}
