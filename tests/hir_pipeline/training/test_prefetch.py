"""The background batch producer: order, errors raised at their item, an early stop ends the thread."""

from __future__ import annotations

import contextlib
import threading
import time

import pytest

from hir_pipeline.training.prefetch import prefetched


def _threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "hir-batch-prefetch"]


@pytest.mark.parametrize("depth", [0, 1, 4])
def test_items_arrive_in_order(depth):
    assert list(prefetched(iter(range(50)), depth)) == list(range(50))
    assert not _threads()


def test_the_producer_runs_ahead_in_another_thread():
    produced = []

    def producer():
        for i in range(10):
            produced.append((i, threading.current_thread().name))
            yield i

    batches = prefetched(producer(), 3)
    assert next(batches) == 0
    deadline = time.monotonic() + 5
    while len(produced) < 4 and time.monotonic() < deadline:  # the first one, then three ahead
        time.sleep(0.01)
    assert len(produced) == 4 and {name for _, name in produced} == {"hir-batch-prefetch"}
    assert list(batches) == list(range(1, 10))


def test_a_producer_error_is_raised_at_its_item():
    def producer():
        yield 1
        yield 2
        raise KeyError("view 7")

    batches = prefetched(producer(), 2)
    assert next(batches) == 1 and next(batches) == 2
    with pytest.raises(KeyError, match="view 7"):
        next(batches)
    assert not _threads()


def test_closing_early_stops_the_producer():
    produced = []

    def endless():
        i = 0
        while True:
            produced.append(i)
            yield i
            i += 1

    with contextlib.closing(prefetched(endless(), 2)) as batches:
        assert next(batches) == 0
    assert not _threads()
    count = len(produced)
    time.sleep(0.3)
    assert len(produced) == count <= 4


def test_negative_depth_is_refused():
    with pytest.raises(ValueError, match="depth"):
        list(prefetched([1], -1))
