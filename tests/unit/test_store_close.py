"""Closing a store while other threads use it: the process must not crash.

Regression: an asyncio shell cancels its tasks on stop, but the worker
threads they started (commits, replica reads and appends) keep running; the
store used to close LMDB under them, and the process died in the C extension.
"""

from __future__ import annotations

import contextlib
import threading
import time
import uuid
from pathlib import Path

from partlog import CreateTopicAndPartitionsRequest, FindBatchRequest, MetadataStore, StoreError, TopicIdPartition
from tests.batches import build_batch, request, wal_key


def test_close_waits_for_operations_in_flight_and_refuses_new_ones(tmp_path: Path) -> None:
    now = int(time.time() * 1000)
    store = MetadataStore.open(tmp_path / "s", sync=False, clock=lambda: now)
    tid = uuid.uuid4()
    store.create_topic_and_partitions([CreateTopicAndPartitionsRequest(tid, "t", 1)])
    tp = TopicIdPartition(tid, 0)
    batch = build_batch(1, timestamp_ms=now)
    done = {"reads": 0, "commits": 0, "refused": 0}
    unexpected: list[BaseException] = []

    def reader() -> None:
        while True:
            try:
                store.read_log(tp, 0, 1 << 30)
                store.find_batches([FindBatchRequest(tp, 0, 1 << 20)], 1 << 20)
                done["reads"] += 1
            except StoreError:
                done["refused"] += 1
                return
            except BaseException as e:
                unexpected.append(e)
                return

    def committer() -> None:
        while True:
            try:
                store.commit_file(wal_key(now), 1, 10_000, [request(tp, batch)])
                done["commits"] += 1
            except StoreError:
                done["refused"] += 1
                return
            except BaseException as e:
                unexpected.append(e)
                return

    threads = [threading.Thread(target=f) for f in (reader, reader, committer, committer)]
    for t in threads:
        t.start()
    while done["reads"] < 20 or done["commits"] < 20:
        time.sleep(0.001)
    store.close()
    for t in threads:
        t.join(30)
    assert not unexpected, unexpected
    assert done["refused"] == 4  # every thread saw a clear error after close, none crashed


def test_a_closed_store_is_not_reopened_and_its_path_opens_again(tmp_path: Path) -> None:
    """Regression (found by a flaky failover run): a broker's reopen of its
    failed store runs in a worker thread that outlives the cancelled task;
    when the broker closed the store meanwhile, the reopen attached a fresh
    LMDB environment nobody closed, and the restarted broker failed with
    "environment already open in this process".  Close is final: a reopen
    after it (or racing it) refuses, and the path opens again."""
    store = MetadataStore.open(tmp_path / "s", sync=False)
    store.close()
    try:
        store.reopen()
    except StoreError as e:
        assert "closed" in str(e)
    else:
        raise AssertionError("reopen after close attached a new environment")
    again = MetadataStore.open(tmp_path / "s", sync=False)  # "already open" before the fix
    again.close()


def test_reopen_and_close_racing_leave_nothing_open(tmp_path: Path) -> None:
    """Either order of a reopen (in another thread) and the owner's close
    ends with the environment closed."""
    for _ in range(20):
        store = MetadataStore.open(tmp_path / "s", sync=False)

        def reopen(s: MetadataStore = store) -> None:
            with contextlib.suppress(StoreError):  # refused when the close came first
                s.reopen()

        t = threading.Thread(target=reopen)
        t.start()
        store.close()
        t.join()
        MetadataStore.open(tmp_path / "s", sync=False).close()
