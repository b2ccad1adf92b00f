"""Batches of ingest units processed in worker processes, results in input order.

A worker turns a batch into a `Parsed`: each unit's Reject (or None) and the rows of the others as
one Arrow table, so what crosses back to the ingest loop is columnar, not Python objects. Order is
the input's whatever the worker count, and at most `window` batches are in flight, so memory holds
a few batches, never a source. With one worker everything runs in this process.
"""

from __future__ import annotations

import multiprocessing
import os
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ProcessPoolExecutor
from dataclasses import dataclass
from typing import Any, TypeVar

T = TypeVar("T")
R = TypeVar("R")


@dataclass(frozen=True)
class Ready:
    """An item that needs no work (a marker, a cached result): passed through in its place."""

    value: Any


def worker_count(requested: int) -> int:
    """Worker processes for `ingest.workers`: 0 means one per CPU this process may use, and none
    at all (parse in this process) on a single CPU, where a worker only adds copying."""
    if requested > 0:
        return requested
    try:
        cpus = len(os.sched_getaffinity(0))
    except AttributeError:
        cpus = os.cpu_count() or 1
    return cpus if cpus > 1 else 0


def ordered_map(fn: Callable[[T], R], items: Iterable[T], workers: int, window: int | None = None) -> Iterator[R]:
    """fn over items in forked worker processes, yielding results in input order (a Ready item's
    value in its place, untouched) with at most
    `window` (default 2 per worker) pending. Fork, not spawn: a caller's script needs no
    `if __name__ == "__main__"` guard, and workers start in milliseconds. They are all forked before
    the first item is taken, so `items` may run on a thread of its own (`core.background.read_ahead`)."""
    if workers < 1:
        yield from (item.value if isinstance(item, Ready) else fn(item) for item in items)
        return
    window = window or 2 * workers
    with ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("fork")) as pool:
        # Fork every worker now, before `items` runs: it may start threads (read_ahead), and a
        # process forked while another thread holds a lock could inherit the lock held forever.
        pool.submit(int).result()
        pending: deque[Future] = deque()
        for item in items:
            if isinstance(item, Ready):
                done: Future = Future()
                done.set_result(item.value)
                pending.append(done)
            else:
                pending.append(pool.submit(fn, item))
            if len(pending) >= window:
                yield pending.popleft().result()
        while pending:
            yield pending.popleft().result()
