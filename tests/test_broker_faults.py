"""Brokers under injected faults, in-process on loopback: failing uploads and
a leader whose commits time out.  Every acknowledged record must be read back
exactly once, at its acknowledged offset, and failures must reach producers
as retriable errors that the idempotent producer retries."""

from __future__ import annotations

import asyncio
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from partlog.broker import Broker, BrokerConfig
from partlog.client import Consumer, Producer, RecordMetadata
from partlog.cluster_meta import StaticMetadata
from partlog.objectstore import LocalDirStore, ObjectStoreError
from partlog.produce_pipeline import ProduceConfig
from partlog.records import TopicIdPartition


class FlakyStore(LocalDirStore):
    """A real local store whose every ``fail_every``-th put fails (retriably)."""

    def __init__(self, root: Path, fail_every: int) -> None:
        super().__init__(root, fsync=False)
        self.fail_every = fail_every
        self.puts = 0
        self.failed = 0
        self._lock = threading.Lock()

    def put(self, key: str, data: bytes) -> None:
        with self._lock:
            self.puts += 1
            fail = self.puts % self.fail_every == 0
        if fail:
            self.failed += 1
            raise ObjectStoreError(f"injected: put {key} failed", key=key, retriable=True)
        super().put(key, data)


async def _cluster(
    tmp_path: Path, objects: LocalDirStore, *, commit_rpc_timeout_ms: int = 10_000
) -> tuple[list[Broker], StaticMetadata]:
    meta = StaticMetadata.generate(azs=3, brokers_per_az=1, topics={"t": 6})
    brokers = [
        Broker(
            BrokerConfig(
                b.broker_id,
                b.az,
                os.path.join(tmp_path, f"b{b.broker_id}"),
                sync=False,
                produce=ProduceConfig(commit_interval_ms=20),
                commit_rpc_timeout_ms=commit_rpc_timeout_ms,
            ),
            meta,
            objects,
        )
        for b in meta.brokers()
    ]
    for br in brokers:
        await br.start()
    meta = meta.with_ports({br.broker_id: br.port for br in brokers})
    for br in brokers:
        br.set_metadata(meta)
    return brokers, meta


async def _produce_and_verify(
    brokers: list[Broker], meta: StaticMetadata, records: int, *, during: Callable[[], Any] | None = None
) -> tuple[Producer, dict[int, RecordMetadata]]:
    [topic] = meta.topics()
    tps = [TopicIdPartition(topic.topic_id, p) for p in range(topic.num_partitions)]
    entry = meta.broker(1)
    assert entry is not None
    producer = Producer((entry.host, entry.port), az=entry.az, linger_ms=2, retry_backoff_ms=20)
    await producer.start()
    futures = {}
    for i in range(records):
        futures[i] = producer.send(tps[i % len(tps)], f"r{i}".encode())
        if i % 20 == 0:
            await asyncio.sleep(0.005)
            if during is not None:
                during()
    await producer.flush()
    acked: dict[int, RecordMetadata] = {}
    for i, f in futures.items():
        if not f.cancelled() and f.exception() is None:
            acked[i] = f.result()
    consumer = Consumer((entry.host, entry.port), max_wait_ms=50)
    await consumer.start()
    consumer.assign(tps)
    seen: dict[int, list[tuple[TopicIdPartition, int]]] = {}
    end = {tp: 0 for tp in tps}
    for md in acked.values():
        end[md.topic_id_partition] = max(end[md.topic_id_partition], md.offset + 1)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and any(consumer.positions[tp] < end[tp] for tp in tps):
        for rec in await consumer.poll():
            seen.setdefault(int((rec.value or b"r-1")[1:]), []).append((rec.topic_id_partition, rec.offset))
    await consumer.close()
    # Exactly once, where the acknowledgement said.
    for i, md in acked.items():
        assert seen.get(i) == [(md.topic_id_partition, md.offset)], f"record {i}: acked {md}, read {seen.get(i)}"
    assert all(len(w) == 1 for w in seen.values()), "a record was read twice"
    # Per partition, offsets follow send order (one producer, idempotent).
    by_tp: dict[TopicIdPartition, list[int]] = {}
    for i in sorted(seen):
        tp, off = seen[i][0]
        by_tp.setdefault(tp, []).append(off)
    assert all(offs == sorted(offs) for offs in by_tp.values())
    return producer, acked


@pytest.mark.timeout(120)
def test_failed_uploads_are_retried_and_nothing_is_lost(tmp_path: Path) -> None:
    async def main() -> None:
        objects = FlakyStore(tmp_path / "objects", fail_every=3)
        brokers, meta = await _cluster(tmp_path, objects)
        try:
            producer, acked = await _produce_and_verify(brokers, meta, 300)
            assert len(acked) == 300  # retried until they succeeded
            assert objects.failed > 0 and sum(b.stats.upload_errors for b in brokers) == objects.failed
            assert producer.stats["retries"] > 0
            await producer.close()
        finally:
            for b in brokers:
                await b.stop()

    asyncio.run(main())


@pytest.mark.timeout(120)
def test_commit_timeouts_are_retried_without_duplicates(tmp_path: Path) -> None:
    """Broker 2's store stalls past the commit RPC timeout for its first
    commits: uploaders answer REQUEST_TIMED_OUT, the producer retries, and the
    stalled commits that did land make the retries duplicates, which the
    leader answers with the original offsets."""

    async def main() -> None:
        objects = LocalDirStore(tmp_path / "objects", fsync=False)
        brokers, meta = await _cluster(tmp_path, objects, commit_rpc_timeout_ms=200)
        slow = brokers[1]
        real_commit = slow.store.commit_file
        stalls = {"left": 3}

        def stalling_commit(*args: Any, **kwargs: Any) -> Any:
            if stalls["left"] > 0:
                stalls["left"] -= 1
                time.sleep(0.5)  # past the 200 ms RPC timeout; the commit still lands
            return real_commit(*args, **kwargs)

        slow.store.commit_file = stalling_commit  # type: ignore[method-assign]
        try:
            producer, acked = await _produce_and_verify(brokers, meta, 200)
            assert len(acked) == 200
            assert stalls["left"] == 0
            assert sum(b.stats.commit_errors for b in brokers) > 0  # the timeouts happened
            assert producer.stats["retries"] > 0
            await producer.close()
        finally:
            for b in brokers:
                await b.stop()

    asyncio.run(main())


@pytest.mark.timeout(120)
def test_batches_grow_under_load_instead_of_queueing(tmp_path: Path) -> None:
    """Regression: the producer closed a batch per partition every linger
    (5 ms) even while 5 requests were in flight, so under steady load batches
    stayed tiny and queued up behind the commit interval.  Now a partition's
    records accumulate until a request can carry them."""

    async def main() -> None:
        objects = LocalDirStore(tmp_path / "objects", fsync=False)
        meta = StaticMetadata.generate(azs=1, brokers_per_az=1, topics={"t": 1})
        broker = Broker(
            BrokerConfig(1, "az1", str(tmp_path / "b1"), sync=False, produce=ProduceConfig(commit_interval_ms=200)),
            meta,
            objects,
        )
        await broker.start()
        meta = meta.with_ports({1: broker.port})
        broker.set_metadata(meta)
        try:
            [topic] = meta.topics()
            tp = TopicIdPartition(topic.topic_id, 0)
            producer = Producer(("127.0.0.1", broker.port), linger_ms=5)
            await producer.start()
            futures = []
            for i in range(2000):  # ~2 records a millisecond for about a second
                futures.append(producer.send(tp, f"r{i}".encode()))
                if i % 20 == 0:
                    await asyncio.sleep(0.01)
            await producer.flush()
            offsets = [f.result().offset for f in futures]
            assert offsets == list(range(2000))
            # One request per commit interval per in-flight slot at most: a
            # second of load needs a few dozen batches, not one per linger.
            assert producer.stats["batches"] < 100, producer.stats
            await producer.close()
        finally:
            await broker.stop()

    asyncio.run(main())
