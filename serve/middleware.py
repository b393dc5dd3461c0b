"""The server's guard, as plain ASGI: API key, body size and deadline, security headers.

Starlette's ``BaseHTTPMiddleware`` costs more per request; this is one function per request. The
body limit counts the bytes actually received (a chunked upload has no Content-Length to trust),
and the whole body must arrive within one deadline, so a client that trickles it in cannot hold a
slot for ever.
"""

from __future__ import annotations

import asyncio
import json
import secrets

from .errors import error_body

# No inline script anywhere (the page loads /static/app.js); styles may be inline.
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


class _Refused(Exception):
    """The request is answered here with an error (status, message, type, code, close the connection)."""

    def __init__(self, status: int, message: str, type_: str, code: str, close: bool = False):
        self.args_ = (status, message, type_, code, close)


class _ClientLeft(Exception):
    pass


class GuardMiddleware:
    def __init__(self, app, api_key: str | None, max_body_bytes: int, body_timeout: float = 30.0):
        self.app, self.api_key, self.max_body_bytes = app, api_key, max_body_bytes
        self.body_timeout = body_timeout

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)

        head = scope["method"] == "HEAD"
        if head:  # HEAD is GET without its body (RFC 9110): every GET route answers it
            scope = {**scope, "method": "GET"}

        async def send_secured(message):
            if message["type"] == "http.response.start":
                message = {**message, "headers": [*message.get("headers", []), *SECURITY_HEADERS]}
            elif head and message["type"] == "http.response.body":
                if message.get("more_body"):
                    return
                message = {**message, "body": b""}
            await send(message)

        if not scope["path"].startswith("/v1/") or scope["method"] == "OPTIONS":
            return await self.app(scope, receive, send_secured)
        try:
            headers = dict(scope["headers"])
            self._check_key(headers)
            self._check_length(headers)
            if scope["method"] in ("POST", "PUT", "PATCH"):
                body = await self._read_body(receive)
                return await self.app(_as_json(scope, body), _replay(body, receive), send_secured)
        except _Refused as refused:
            return await self._error(send, *refused.args_)
        except _ClientLeft:
            return None
        return await self.app(scope, receive, send_secured)

    def _check_key(self, headers: dict) -> None:
        if self.api_key is None:
            return
        auth = headers.get(b"authorization", b"")
        token = auth[7:] if auth[:7].lower() == b"bearer " else b""
        # Bytes against the key's UTF-8 bytes: a non-ASCII key matches what clients send (UTF-8).
        if not secrets.compare_digest(token, self.api_key.encode("utf-8")):
            raise _Refused(
                401, "missing or wrong API key (Authorization: Bearer ...)", "authentication_error", "invalid_api_key"
            )

    def _check_length(self, headers: dict) -> None:
        length = headers.get(b"content-length", b"")
        if length.isdigit() and int(length) > self.max_body_bytes:
            raise _Refused(
                413,
                f"request body of {int(length)} bytes is over the {self.max_body_bytes} byte limit",
                "invalid_request_error",
                "request_too_large",
            )

    async def _read_body(self, receive) -> bytes:
        """The whole body, read here up to the limit and within the deadline."""
        chunks, size, more = [], 0, True
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.body_timeout
        while more:
            try:
                message = await asyncio.wait_for(receive(), max(0.0, deadline - loop.time()))
            except TimeoutError:
                raise _Refused(
                    408,
                    f"the request body did not arrive within {self.body_timeout:g} s",
                    "invalid_request_error",
                    "request_timeout",
                    close=True,
                ) from None
            if message["type"] == "http.disconnect":
                raise _ClientLeft
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.max_body_bytes:
                raise _Refused(
                    413,
                    f"request body is over the {self.max_body_bytes} byte limit",
                    "invalid_request_error",
                    "request_too_large",
                )
            chunks.append(chunk)
            more = message.get("more_body", False)
        return b"".join(chunks)

    @staticmethod
    async def _error(send, status: int, message: str, type_: str, code: str, close: bool = False) -> None:
        body = json.dumps(error_body(message, type_, code).model_dump()).encode()
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


FORM = b"application/x-www-form-urlencoded"
SEND_JSON = "the request body must be a JSON object sent with Content-Type: application/json"


def _as_json(scope, body: bytes):
    """The scope of a request whose body the API reads as JSON. ``curl -d '{...}'`` labels its JSON as a
    form (application/x-www-form-urlencoded): a body that parses as a JSON object is relabelled as the
    JSON it is; any other body that does not say it is JSON is refused with what to send instead."""
    headers = dict(scope["headers"])
    media = headers.get(b"content-type", b"").split(b";")[0].strip().lower()
    if media == b"application/json" or (media.startswith(b"application/") and media.endswith(b"+json")):
        return scope
    if not media:  # unlabelled: read as JSON (FastAPI reads no body as JSON that does not say it is)
        return _labelled_json(scope)
    if media == FORM:
        try:
            parsed = json.loads(body)
        except ValueError:
            parsed = None
        except RecursionError:  # thousands deep ("[[[[..."): no request is
            raise _Refused(
                400, "the request body is nested too deeply", "invalid_request_error", "invalid_request"
            ) from None
        if isinstance(parsed, dict):
            return _labelled_json(scope)
    got = media.decode("latin-1") + (" that is not a JSON object" if media == FORM else "")
    raise _Refused(400, f"{SEND_JSON} (got {got})", "invalid_request_error", "invalid_request")


def _labelled_json(scope):
    """The scope with its body labelled application/json (and no other Content-Type)."""
    relabelled = [(k, v) for k, v in scope["headers"] if k != b"content-type"]
    return {**scope, "headers": [*relabelled, (b"content-type", b"application/json")]}


def _replay(body: bytes, receive):
    """A ``receive`` that hands the app the body already read, then what the connection says next."""
    sent = False

    async def replay():
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replay
