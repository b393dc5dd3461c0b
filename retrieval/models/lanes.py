"""One lane for the CPU's model calls: the cheapest waiting call runs first.

A server's requests share two CPU cores. An ordinary question costs one short encoding (a few dozen tokens);
a question of 2,000 characters costs hundreds of tokens, and reading the new candidates of a question costs
a few model calls of 1,000 tokens each. When every call runs as it comes, ordinary questions wait behind the
expensive ones (issue 40: four clients' p50 went 284 -> 844 ms beside one client of long questions). So every
model call through ONNX Runtime takes the lane, and when it is free the waiting call of the fewest tokens
goes next; a call that has waited :data:`PATIENCE` seconds goes before any cheaper newcomer, so an expensive
request is slowed, never starved. Expensive work is cut into calls (a slice of articles, a run of at most
1,024 padded tokens), so between two of its calls a cheap one gets through. An index build, the only user of
its cores, takes the lane once for a whole list and runs it two runs at a time (onnx_encoder).
"""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Callable
from typing import TypeVar

from wetqa.cancel import check

T = TypeVar("T")

PATIENCE = 2.0  # seconds a call waits before it goes ahead of cheaper ones that came after it
CANCEL_POLL = 0.25  # seconds between a waiting call's looks at whether its client has gone


class Lane:
    """Model calls one at a time, the cheapest waiting one first (see the module docstring)."""

    def __init__(self, patience: float = PATIENCE):
        self.patience = patience
        self._cond = threading.Condition()
        self._busy = False
        self._waiting: dict[int, tuple[float, float]] = {}  # ticket -> (cost, arrival)
        self._tickets = itertools.count()
        self.calls = 0

    def run(self, cost: float, fn: Callable[[], T]) -> T:
        """``fn()`` when its turn comes; :class:`wetqa.cancel.Cancelled` instead once the work it belongs to was
        cancelled (its client has gone), checked on arrival and at every wake-up while it waits."""
        check()
        ticket = next(self._tickets)
        with self._cond:
            self._waiting[ticket] = (float(cost), time.monotonic())
            try:
                while self._busy or self._next() != ticket:
                    self._cond.wait(timeout=min(self.patience, CANCEL_POLL))
                    check()
            except BaseException:
                # A caller interrupted while waiting gives its place up (an overdue ticket left behind would
                # be chosen next for ever).
                del self._waiting[ticket]
                self._cond.notify_all()
                raise
            del self._waiting[ticket]
            self._busy = True
        try:
            return fn()
        finally:
            with self._cond:
                self._busy = False
                self.calls += 1
                self._cond.notify_all()

    def _next(self) -> int:
        """The ticket to run next: the oldest of those that have waited past patience, else the cheapest."""
        now = time.monotonic()
        overdue = [t for t, (_, since) in self._waiting.items() if now - since >= self.patience]
        if overdue:
            return min(overdue)
        return min(self._waiting, key=lambda t: (self._waiting[t][0], t))

    @property
    def waiting(self) -> int:
        with self._cond:
            return len(self._waiting)


LANE = Lane()  # the process's one lane: its model calls share the same cores
