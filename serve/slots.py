"""The server's concurrency slots, shared fairly between clients.

A request over the limit gets 429 at once (a client retries after ``Retry-After``; nothing queues unseen). A
client alone may use every slot. But while another client is waiting (it was refused within the last
:data:`WAITING` seconds and has not been served since), a client may take a slot only while it holds fewer than
:meth:`Slots.share` of them (all but a quarter): however many requests one client sends (issue 55: sixteen long
questions from one client, then abandoned, held every slot for 19.5 s), the slots it gives back go to the
others. A client is its peer address (behind a proxy every request is one client: the share never applies).
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

WAITING = 3.0  # seconds a refused client counts as waiting (the openai clients retry after 1 s)


def client_share(limit: int) -> int:
    """How many slots one client may hold while another waits: all but a quarter of them (at least one kept for
    the others) when the limit is 2 or more, else the one there is."""
    if limit <= 1:
        return limit
    return max(1, limit - max(1, limit // 4))


@dataclass(frozen=True)
class Refusal:
    """Why a client got no slot: every slot is held ("limit"), or it holds its share while others wait ("share")."""

    reason: Literal["limit", "share"]


class Slots:
    def __init__(self, limit: int, clock: Callable[[], float] = time.monotonic):
        self.limit = limit
        self.share = client_share(limit)
        self._held: Counter[str] = Counter()
        self._refused: dict[str, float] = {}  # client -> when it was last refused (while it waits)
        self._lock = threading.Lock()
        self._clock = clock

    def take(self, client: str) -> Callable[[], None] | Refusal:
        """A slot for ``client``: the function that gives it back (once, from any thread), or a :class:`Refusal`."""
        now = self._clock()
        with self._lock:
            for other, since in list(self._refused.items()):
                if now - since > WAITING:
                    del self._refused[other]
            others_wait = any(other != client for other in self._refused)
            if sum(self._held.values()) >= self.limit:
                self._refused[client] = now
                return Refusal("limit")
            if others_wait and self._held[client] >= self.share:
                self._refused[client] = now
                return Refusal("share")
            self._refused.pop(client, None)
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
