"""Overlap reading, converting and writing on threads, in order, with bounded memory.

Arrow's Parquet reader and writer, its compute kernels and hashlib release the GIL, so a stage that
reads Parquet, converts rows in Python and writes Parquet uses a second core when the reading and
the writing run beside the conversion. Both helpers keep the order of their items exactly (outputs
do not depend on thread timing) and hold at most `ahead` items in flight.
"""

from __future__ import annotations

import queue
import threading
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, TypeVar

T = TypeVar("T")
_POLL_S = 0.1


def read_ahead(items: Iterable[T], ahead: int = 2) -> Iterator[T]:
    """The items of `items`, produced on a background thread up to `ahead` in advance. An exception
    raised while producing is raised here, in its place; leaving the loop early stops the thread."""
    if ahead < 1:
        raise ValueError("ahead must be at least 1")
    slots: queue.Queue = queue.Queue(maxsize=ahead)
    stop = threading.Event()

    def put(entry: tuple[str, Any]) -> bool:
        while not stop.is_set():
            try:
                slots.put(entry, timeout=_POLL_S)
                return True
            except queue.Full:
                continue
        return False

    def produce() -> None:
        try:
            for item in items:
                if not put(("item", item)):
                    return
            put(("end", None))
        except BaseException as e:  # handed to the consumer, raised there
            put(("error", e))

    thread = threading.Thread(target=produce, name="read_ahead", daemon=True)
    thread.start()
    try:
        while True:
            kind, value = slots.get()
            if kind == "item":
                yield value
            elif kind == "end":
                return
            else:
                raise value
    finally:
        stop.set()
        thread.join()


class InOrder:
    """Runs calls on one background thread, one at a time, in the order they were submitted.
    `submit` waits while `ahead` calls are pending; an exception of a call is raised by the next
    `submit` or by `join`. `abandon` (on failure) drops the calls not started and waits for the
    running one, so nothing writes after it returns."""

    def __init__(self, ahead: int = 2, name: str = "in_order"):
        if ahead < 1:
            raise ValueError("ahead must be at least 1")
        self._ahead = ahead
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix=name)
        self._pending: deque[Future] = deque()

    def submit(self, fn: Callable[..., Any], *args: Any) -> None:
        while len(self._pending) >= self._ahead:
            self._pending.popleft().result()
        self._pending.append(self._pool.submit(fn, *args))

    def join(self) -> None:
        """Wait for every submitted call (raising the first exception) and stop the thread."""
        try:
            while self._pending:
                self._pending.popleft().result()
        finally:
            self.abandon()

    def abandon(self) -> None:
        self._pending.clear()
        self._pool.shutdown(wait=True, cancel_futures=True)
