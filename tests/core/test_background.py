"""core/background.py: order kept, errors raised where they belong, threads stopped."""

from __future__ import annotations

import threading
import time

import pyarrow as pa
import pytest

from tracelake.core.background import InOrder, read_ahead
from tracelake.core.schema import load_schema
from tracelake.core.tables import ShardWriter


def test_read_ahead_keeps_order_and_raises_in_place():
    assert list(read_ahead(iter(range(100)), ahead=3)) == list(range(100))

    def items():
        yield 1
        yield 2
        raise ValueError("stale selection")

    got = []
    with pytest.raises(ValueError, match="stale selection"):
        for x in read_ahead(items()):
            got.append(x)
    assert got == [1, 2]


def test_read_ahead_stops_its_thread_when_the_loop_ends_early():
    produced = []

    def endless():
        i = 0
        while True:
            produced.append(i)
            yield i
            i += 1

    before = threading.active_count()
    for x in read_ahead(endless(), ahead=2):
        if x == 5:
            break
    assert threading.active_count() == before
    assert len(produced) <= 5 + 1 + 2 + 1  # the consumed ones, the queue, the one being put


def test_in_order_runs_calls_in_submission_order_with_bounded_backlog():
    done, in_flight, most = [], [0], [0]
    lock = threading.Lock()

    def work(i):
        with lock:
            in_flight[0] -= 1
        time.sleep(0.001 * (i % 3))
        done.append(i)

    runner = InOrder(ahead=2)
    for i in range(30):
        with lock:
            in_flight[0] += 1
            most[0] = max(most[0], in_flight[0])
        runner.submit(work, i)
    runner.join()
    assert done == list(range(30)) and most[0] <= 3


def test_in_order_raises_a_failed_call_at_the_next_submit_or_join():
    runner = InOrder(ahead=1)
    runner.submit(lambda: 1 / 0)
    with pytest.raises(ZeroDivisionError):
        runner.submit(lambda: None)
    runner.abandon()

    runner = InOrder(ahead=4)
    runner.submit(lambda: 1 / 0)
    with pytest.raises(ZeroDivisionError):
        runner.join()


def test_shard_writer_stops_writing_when_its_block_fails(tmp_path):
    schema = load_schema("export_rejects")
    row = {"item_id": "i", "trajectory_id": "t", "source": "s", "name": "n", "reason": "r", "detail": "d"}
    with pytest.raises(RuntimeError, match="conversion failed"):
        with ShardWriter(tmp_path / "d", schema, rows_per_shard=10, row_group_size=2) as w:
            for _ in range(25):
                w.write_batch(pa.Table.from_pylist([row], schema.arrow))
            raise RuntimeError("conversion failed")
    before = sorted(p.stat().st_size for p in (tmp_path / "d").iterdir())
    time.sleep(0.2)
    assert sorted(p.stat().st_size for p in (tmp_path / "d").iterdir()) == before  # nothing writes any more
