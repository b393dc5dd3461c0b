"""The HTTP server: uvicorn, with a deadline for each request's headers.

uvicorn closes idle keep-alive connections but waits for ever for headers that come in one byte
at a time, so a few hundred slow ("slowloris") connections hold the server's sockets. Each
request's headers must now arrive within ``header_timeout`` seconds of its first byte (or of the
connection, for one that sends nothing); the body has its own deadline in the app
(:class:`wetqa.serve.middleware.GuardMiddleware`). A client that half-closes after its request (it
shuts its writing side and waits for the answer) is answered, then the connection is closed.
"""

from __future__ import annotations

import asyncio

import h11
import uvicorn
from uvicorn.protocols.http.h11_impl import H11Protocol

from .config import HEADER_TIMEOUT

PROBE_INTERVAL = 0.25  # seconds between a half-closed connection's "102 Processing" probes while its answer is made


class HeaderDeadlineProtocol(H11Protocol):
    """uvicorn's h11 protocol that closes a connection whose request headers are late."""

    header_timeout = HEADER_TIMEOUT

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        self._header_deadline: asyncio.TimerHandle | None = None
        self._probe: asyncio.TimerHandle | None = None
        super().connection_made(transport)
        self._arm()

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        # IDLE: the request line and headers are not complete yet (a new request, or the next one on
        # a kept-alive connection); any later state means they have all arrived.
        if self.conn.their_state is h11.IDLE and not self.transport.is_closing():
            self._arm()
        else:
            self._disarm()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        if self._probe is not None:
            self._probe.cancel()
        super().connection_lost(exc)

    def eof_received(self) -> bool | None:  # type: ignore[override]
        """The client shut its writing side. One that sent a whole request and waits for the answer
        (``shutdown(SHUT_WR)``, ``nc -N``) still reads: keep the connection open for the answer, then close
        it. Without a whole request there is nothing to answer, and a client whose stream has begun has
        left (closing a socket ends its input too: the stream's upstream must stop): close now (returning
        None lets asyncio close the transport)."""
        cycle = self.cycle
        waiting = cycle is not None and not cycle.response_started and self.conn.their_state is h11.DONE
        if waiting:
            cycle.keep_alive = False  # uvicorn closes the connection once the response is complete
            # An end of input is also what a client that closed its socket altogether sends: it left, and its
            # work must stop (issue 55). Only writing tells the two apart: an HTTP/1.1 client is sent "102
            # Processing" (interim responses RFC 9110 15.2 asks every HTTP/1.1 client to read past) until the answer starts; a
            # socket closed for good answers with a reset, the next write fails and the request is cancelled.
            if cycle.scope.get("http_version") == "1.1":
                self._probe = self.loop.call_later(PROBE_INTERVAL, self._probe_peer)
            return True
        return None

    def _probe_peer(self) -> None:
        cycle = self.cycle
        if cycle is None or cycle.response_started or cycle.disconnected or self.transport.is_closing():
            return
        try:
            self.transport.write(self.conn.send(h11.InformationalResponse(status_code=102, headers=[])))
        except h11.LocalProtocolError:
            return  # the connection is past the point where an interim response fits
        self._probe = self.loop.call_later(PROBE_INTERVAL, self._probe_peer)

    def _arm(self) -> None:
        if self._header_deadline is None:
            self._header_deadline = self.loop.call_later(self.header_timeout, self._late)

    def _disarm(self) -> None:
        if self._header_deadline is not None:
            self._header_deadline.cancel()
            self._header_deadline = None

    def _late(self) -> None:
        self._header_deadline = None
        if self.conn.their_state is h11.IDLE and not self.transport.is_closing():
            self.transport.close()  # no request to answer yet: a 408 would have nothing to refer to


def server_config(
    app,
    host: str = "127.0.0.1",
    port: int = 8000,
    header_timeout: float = HEADER_TIMEOUT,
    timeout_keep_alive: float = 5.0,
    log_level: str = "warning",
) -> uvicorn.Config:
    """uvicorn's configuration for wetqa's app, with the header deadline."""
    protocol = type("WetqaHTTPProtocol", (HeaderDeadlineProtocol,), {"header_timeout": header_timeout})
    return uvicorn.Config(
        app,
        host=host,
        port=port,
        http=protocol,
        log_level=log_level,
        # Typed int by uvicorn; it only reaches loop.call_later, which takes fractions of a second too.
        timeout_keep_alive=timeout_keep_alive,  # type: ignore[arg-type]
    )
