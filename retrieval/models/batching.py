"""Concurrent callers of one model served by shared calls (micro-batching).

A server's worker threads each ask for a query vector or a few cross-encoder scores. One model
object must not be called from two threads at once (a fast tokenizer fails with "Already
borrowed"), and one call over 16 queries costs far less than 16 calls. :class:`Batcher` does both:
a caller that finds the model idle makes the call for itself and for everyone who queued while
the previous call ran; the others wait for their share of the results.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import Generic, TypeVar

from wetqa.cancel import shielded

T = TypeVar("T")
R = TypeVar("R")


class _Job(Generic[T, R]):
    __slots__ = ("items", "results", "error", "done")

    def __init__(self, items: Sequence[T]):
        self.items = list(items)
        self.results: list[R] = []
        self.error: BaseException | None = None
        self.done = False


class Batcher(Generic[T, R]):
    """``batcher(items)`` returns ``fn(items)``, with the items of concurrent callers joined into one call.

    ``fn`` takes a list and returns one result per item, in order. Calls never overlap. A call
    takes whole jobs in arrival order, up to ``max_items`` items (a single larger job goes alone).
    When a call of several callers' items fails, each caller's items are tried again alone, so an
    error reaches only the callers whose own items fail.
    """

    def __init__(self, fn: Callable[[list[T]], Sequence[R]], max_items: int = 256):
        self._fn = fn
        self.max_items = max_items
        self._cond = threading.Condition()
        self._queue: list[_Job[T, R]] = []
        self._busy = False
        self.calls = 0  # model calls made, and items sent through them (for tests and benchmarks)
        self.items = 0

    @property
    def waiting(self) -> int:
        """Jobs queued behind the running call."""
        with self._cond:
            return len(self._queue)

    def __call__(self, items: Sequence[T]) -> list[R]:
        job: _Job[T, R] = _Job(items)
        with self._cond:
            self._queue.append(job)
            while not job.done:
                if self._busy:
                    self._cond.wait()
                    continue
                self._run_next()
        if job.error is not None:
            raise job.error
        return job.results

    def _call(self, items: list[T]) -> list[R]:
        results = list(self._fn(items)) if items else []
        if len(results) != len(items):
            raise RuntimeError(f"a batched call returned {len(results)} results for {len(items)} items")
        return results

    def _run_next(self) -> None:
        """Take the next jobs and call the model for them, the lock released meanwhile. Lock held on entry."""
        batch: list[_Job[T, R]] = []
        size = 0
        while self._queue and (not batch or size + len(self._queue[0].items) <= self.max_items):
            job = self._queue.pop(0)
            batch.append(job)
            size += len(job.items)
        self._busy = True
        self._cond.release()
        try:
            flat = [x for job in batch for x in job.items]
            try:
                # A call for several callers is none of theirs alone: a caller whose client has gone must not
                # cancel the others' items (wetqa.cancel); it stops at its own next call.
                results = shielded(self._call, flat) if len(batch) > 1 else self._call(flat)
            except Exception as exc:  # noqa: BLE001 - raised again in the callers whose items fail
                if len(batch) == 1:
                    batch[0].error = exc
                else:
                    # One caller's bad item must not fail the others: each job again, alone.
                    for job in batch:
                        try:
                            job.results = shielded(self._call, job.items)
                        except Exception as alone:  # noqa: BLE001 - raised again in this caller only
                            job.error = alone
            else:
                at = 0
                for job in batch:
                    job.results = results[at : at + len(job.items)]
                    at += len(job.items)
        finally:
            self._cond.acquire()
            self.calls += 1
            self.items += size
            for job in batch:
                if job.error is None and len(job.results) != len(job.items):  # the leader was interrupted
                    job.error = RuntimeError("the batched model call was interrupted")
                job.done = True
            self._busy = False
            self._cond.notify_all()
