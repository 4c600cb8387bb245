"""Run a batch producer ahead of the training step, in a background thread.

The host-side work of a step (augmenting the views, packing them into tensors, the pair exclusions) depends only
on the inputs and on the epoch's seeded generators, never on the model, so it can run while the previous step
computes: the GPU then never waits for Python packing. On a CPU the thread competes with the step's own torch
threads for the same cores, so the trainer prefetches only on CUDA by default (``TrainConfig.prefetch_batches``).
The producer consumes its generators in the same order as an inline loop, so the batches, and the trained model,
are the same with or without prefetching.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Iterable, Iterator
from typing import TypeVar

T = TypeVar("T")

_DONE = object()


class _Failure:
    def __init__(self, error: BaseException):
        self.error = error


def prefetched(batches: Iterable[T], depth: int) -> Iterator[T]:
    """Yield ``batches`` in order, producing up to ``depth`` of them ahead in a daemon thread.

    An exception raised by the producer is raised here, at the item it failed on. When the consumer stops early
    (an exception in the step, ``close()``), the producer stops at its next item and the thread ends.

    Args:
        batches: the producer (typically a generator; it runs in the background thread when ``depth > 0``).
        depth: batches produced ahead of the consumer; 0 produces each one when it is asked for (no thread).
    """
    if depth < 0:
        raise ValueError("depth must be >= 0")
    if depth == 0:
        yield from batches
        return
    ready: queue.Queue = queue.Queue(maxsize=depth)
    stop = threading.Event()

    def put(item) -> bool:
        while not stop.is_set():
            try:
                ready.put(item, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def produce() -> None:
        try:
            for item in batches:
                if not put(item):
                    return
            put(_DONE)
        except BaseException as error:  # noqa: BLE001 - handed to the consumer, raised there
            put(_Failure(error))

    thread = threading.Thread(target=produce, name="hir-batch-prefetch", daemon=True)
    thread.start()
    try:
        while True:
            item = ready.get()
            if item is _DONE:
                return
            if isinstance(item, _Failure):
                raise item.error
            yield item
    finally:
        stop.set()
        thread.join()
