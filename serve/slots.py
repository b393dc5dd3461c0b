"""The server's concurrency slots, shared fairly between clients.

A request over the limit gets 429 at once (a client retries; nothing queues unseen). One client may hold at
most :meth:`Slots.share` of them, so that however many requests it sends (issue 55: sixteen long questions
from one client, then abandoned, held every slot for 19.5 s) another client always finds one free. A client
is its peer address (behind a proxy, the forwarded address uvicorn is told to trust).
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable


def client_share(limit: int) -> int:
    """How many slots one client may hold: all but a quarter of them (at least one kept for the others) when
    the limit is 2 or more, else the one there is."""
    if limit <= 1:
        return limit
    return max(1, limit - max(1, limit // 4))


class Slots:
    def __init__(self, limit: int):
        self.limit = limit
        self.share = client_share(limit)
        self._held: Counter[str] = Counter()
        self._lock = threading.Lock()

    def take(self, client: str) -> Callable[[], None] | str:
        """A slot for ``client``: the function that gives it back (once, from any thread), or why there is none
        ("limit": every slot is held; "share": this client holds its share)."""
        with self._lock:
            if sum(self._held.values()) >= self.limit:
                return "limit"
            if self._held[client] >= self.share:
                return "share"
            self._held[client] += 1
        given = threading.Event()

        def release() -> None:
            with self._lock:
                if given.is_set():
                    return
                given.set()
                self._held[client] -= 1
                if self._held[client] <= 0:
                    del self._held[client]

        return release

    @property
    def in_use(self) -> int:
        with self._lock:
            return sum(self._held.values())
