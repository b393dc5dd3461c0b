"""Work for a client that has gone is stopped at its next model call.

A server answers in worker threads; a client that disconnects (or whose request passed its deadline) leaves
its work running, holding a slot and the cores (issue 55: sixteen long questions sent and abandoned held every
slot for 19.5 s). The server binds a cancel event to the work's thread (:func:`cancellable`; threads it starts for the work
inherit it); every model call through the CPU lane (:mod:`wetqa.retrieval.models.lanes`) asks :func:`check`
first, and so does the answer between retrieval and generation, which raises :class:`Cancelled` once the event
is set. A call that has begun runs to its end (ONNX Runtime cannot be interrupted), so abandoned work stops
within one call. A model call made for several requests at once (micro-batching) is :func:`shielded`: one
request's client leaving must not fail the others.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from contextvars import ContextVar
from typing import TypeVar

T = TypeVar("T")

_CANCEL: ContextVar[threading.Event | None] = ContextVar("wetqa_cancel", default=None)


class Cancelled(Exception):
    """The work's client has gone: nobody will read its result."""


def check() -> None:
    """Raise :class:`Cancelled` when the work this thread does was cancelled."""
    event = _CANCEL.get()
    if event is not None and event.is_set():
        raise Cancelled("the client has gone")


def cancellable(event: threading.Event, fn: Callable[..., T], *args) -> T:
    """``fn(*args)`` with ``event`` as its cancel event (in the calling thread, for the call's length)."""
    token = _CANCEL.set(event)
    try:
        return fn(*args)
    finally:
        _CANCEL.reset(token)


def shielded(fn: Callable[..., T], *args) -> T:
    """``fn(*args)`` that no cancel event stops (work done for others too)."""
    token = _CANCEL.set(None)
    try:
        return fn(*args)
    finally:
        _CANCEL.reset(token)
