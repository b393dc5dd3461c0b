"""Work for a client that has gone stops at its next model call, and never fails another client's work."""

from __future__ import annotations

import threading

import pytest

from wetqa.cancel import Cancelled, cancellable, check

pytestmark = pytest.mark.unit


def test_a_model_call_of_cancelled_work_is_not_made():
    from wetqa.retrieval.models.lanes import Lane

    lane, gone, calls = Lane(), threading.Event(), []
    assert cancellable(gone, lane.run, 1, lambda: calls.append(1) or "done") == "done"
    gone.set()
    with pytest.raises(Cancelled):
        cancellable(gone, lane.run, 1, lambda: calls.append(2))
    assert calls == [1] and lane.waiting == 0  # its place in the lane is given up
    check()  # outside the work, nothing is cancelled


def test_a_batched_call_led_by_cancelled_work_still_serves_the_others():
    # A batch's leader makes the model call for every caller queued; a leader whose client had gone failed the
    # others' items with Cancelled (found by review: a connected client's request got a 500).
    from wetqa.retrieval.models.batching import Batcher
    from wetqa.retrieval.models.lanes import Lane

    lane = Lane()
    batcher = Batcher(lambda items: lane.run(len(items), lambda: [x * 2 for x in items]))
    from wetqa.retrieval.models.batching import _Job

    other = _Job([3])  # another request's items, queued while the model was busy
    batcher._queue.append(other)
    gone = threading.Event()
    gone.set()
    assert cancellable(gone, batcher, [1, 2]) == [2, 4]  # the leader's call served both
    assert other.done and other.error is None and other.results == [6]
    with pytest.raises(Cancelled):
        cancellable(gone, lane.run, 1, lambda: None)  # the leader's own next call stops
