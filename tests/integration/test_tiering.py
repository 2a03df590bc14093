"""The leader's builder loop (partlog.broker.tiering) on a real broker over
loopback: segments closed by segment.bytes and by age, reads served from
them, WAL references released, nothing tiered without the config, a failed
upload retried under a new key, and a restart between upload and swap."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest

from partlog.broker.server import Broker, BrokerConfig
from partlog.broker.tiering import SEGMENT_BUILDS_IN_FLIGHT_MAX
from partlog.client.consumer import Consumer
from partlog.client.producer import Producer
from partlog.controller.cluster_meta import StaticMetadata, TopicInfo
from partlog.kafka.records import FindBatchRequest, TopicIdPartition
from partlog.produce.pipeline import ProduceConfig
from partlog.replication.config import ReplicationConfig
from partlog.store import Segment, SegmentSwap, SegmentSwapResult
from partlog.store.layout import SEGMENT_SWAP_DEADLINE_MS_DEFAULT
from partlog.wal.key import parse_segment_key
from partlog.wal.localdir_store import LocalDirStore
from partlog.wal.objectstore import ObjectStore, iter_objects
from partlog.wal.s3_store import S3Store

MiB = 1 << 20


class RecordingStore(LocalDirStore):
    """Counts every PUT per key (a key written twice was overwritten)."""

    def __init__(self, root: Path) -> None:
        super().__init__(root, fsync=False)
        self.puts: dict[str, int] = {}
        self._lock = threading.Lock()

    def put(self, key: str, data: bytes) -> None:
        with self._lock:
            self.puts[key] = self.puts.get(key, 0) + 1
        super().put(key, data)


def _broker(tmp_path: Path, meta: StaticMetadata, objects: ObjectStore, interval_ms: int = 20) -> Broker:
    config = BrokerConfig(
        1, "az1", str(tmp_path / "b1"), sync=False, produce=ProduceConfig(commit_interval_ms=5),
        tiering_interval_ms=interval_ms,
        # References are asserted gone as soon as they move (no release grace).
        replication=ReplicationConfig(release_grace_ms=0),
    )  # fmt: skip
    return Broker(config, meta, objects)


@asynccontextmanager
async def _one_broker(
    tmp_path: Path, objects: ObjectStore, partitions: int = 1
) -> AsyncIterator[tuple[Broker, TopicInfo, TopicIdPartition]]:
    """One started broker leading every partition of topic "t": (broker, topic, partition 0)."""
    meta = StaticMetadata.generate(azs=1, brokers_per_az=1, topics={"t": partitions})
    broker = _broker(tmp_path, meta, objects)
    await broker.start()
    broker.set_metadata(meta.with_ports({1: broker.port}))
    try:
        [topic] = meta.topics()
        yield broker, topic, TopicIdPartition(topic.topic_id, 0)
    finally:
        await broker.stop()


async def _produce(broker: Broker, tp: TopicIdPartition, values: list[bytes]) -> None:
    producer = Producer(("127.0.0.1", broker.port), linger_ms=2, batch_bytes_max=64 << 10)
    await producer.start()
    futures = [producer.send(tp, v) for v in values]
    await producer.flush()
    await asyncio.gather(*futures)
    await producer.close()


async def _consume(broker: Broker, tp: TopicIdPartition, n: int) -> list[bytes | None]:
    consumer = Consumer(("127.0.0.1", broker.port), max_wait_ms=20)
    await consumer.start()
    consumer.assign([tp])
    values: list[bytes | None] = []
    for _ in range(2_000):  # bounded
        if len(values) >= n:
            break
        values += [r.value for r in await consumer.poll()]
    await consumer.close()
    return values


async def _until(check: Callable[[], Awaitable[bool] | bool], what: str, seconds: float = 30) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        got = check()
        if got if isinstance(got, bool) else await got:
            return
        await asyncio.sleep(0.02)
    raise AssertionError(f"timed out waiting for {what}")


def _covered(rows: list[Segment]) -> int:
    """The offset after the contiguous tiered ranges from 0 (asserting they are)."""
    end = 0
    for r in rows:
        assert r.start_offset == end, rows
        end = r.end_offset + 1
    return end


def _keys(broker: Broker, tp: TopicIdPartition, start: int, end: int) -> list[tuple[int, str]]:
    """(base offset, object key) of the batches of [start, end)."""
    out: list[tuple[int, str]] = []
    offset = start
    while offset < end:
        [found] = broker.store.find_batches([FindBatchRequest(tp, offset, 1 << 30)], 1 << 30)
        assert found.batches
        out += [(b.metadata.base_offset, b.object_key) for b in found.batches if b.metadata.base_offset < end]
        offset = found.batches[-1].metadata.last_offset + 1
    return out


@pytest.mark.timeout(120)
def test_segments_by_size_take_the_references_and_serve_reads(tmp_path: Path) -> None:
    async def main() -> None:
        objects = RecordingStore(tmp_path / "objects")
        async with _one_broker(tmp_path, objects) as (broker, topic, tp):
            values = [f"{i:05d}".encode() * 1600 for i in range(300)]  # 8 KB each, ~2.4 MB
            await _produce(broker, tp, values)
            hwm = broker.store.high_watermark(tp)
            assert hwm == 300
            wal_keys = dict(_keys(broker, tp, 0, hwm))
            assert not broker.tiering.started  # no topic enables it yet
            broker.alter_topic_configs(topic.topic_id, {"remote.storage.enable": "true", "segment.bytes": MiB})
            assert broker.tiering.started

            def two_segments() -> bool:
                return len(broker.store.segments(tp)) >= 2

            await _until(two_segments, "two segments")
            await asyncio.sleep(0.2)  # a few more periods: nothing else closes (segment.ms is 7 days)
            rows = broker.store.segments(tp)
            assert len(rows) == 2
            tiered = _covered(rows)
            assert all(r.size <= MiB and r.uploader == 1 for r in rows)
            # The tail left open holds less than one more segment.
            tail = _keys(broker, tp, tiered, hwm)
            assert tail and all(k == wal_keys[o] for o, k in tail)
            # The tiered batches name their segment; the WAL objects that only
            # held tiered batches are no longer referenced.
            now_keys = dict(_keys(broker, tp, 0, tiered))
            for r in rows:
                assert all(now_keys[o] == r.object_key for o in now_keys if r.start_offset <= o <= r.end_offset)
                assert objects.head(r.object_key).size == r.size
            moved = {wal_keys[o] for o in now_keys} - {k for _, k in tail}
            assert moved and broker.store.referenced_files(moved) == set()
            assert broker.store.referenced_files({r.object_key for r in rows}) == {r.object_key for r in rows}
            # The segment holds the batches as the log stores them: what a
            # fetch of its range returns, byte for byte.
            first = rows[0]
            answer = await broker.fetch(
                [FindBatchRequest(tp, 0, first.size)], max_wait_ms=0, min_bytes=1, max_bytes=first.size
            )
            assert answer["partitions"][0][3] == objects.get(first.object_key)
            # A consumer from offset 0 reads every record, the first ones from the segments.
            assert await _consume(broker, tp, 300) == values
            assert broker.store.check() == []
            assert all(n == 1 for n in objects.puts.values())  # nothing overwritten
            m = broker.metrics
            assert m.tiered_segments._value.get() == 2
            assert m.tiered_swaps.labels(outcome="ok")._value.get() == 2
            assert m.tiered_bytes._value.get() == sum(r.size for r in rows)

    asyncio.run(main())


@pytest.mark.timeout(120)
def test_an_idle_tail_is_tiered_once_older_than_segment_ms(tmp_path: Path) -> None:
    async def main() -> None:
        objects = RecordingStore(tmp_path / "objects")
        async with _one_broker(tmp_path, objects) as (broker, topic, tp):
            broker.alter_topic_configs(topic.topic_id, {"remote.storage.enable": "true", "segment.ms": 300})
            await _produce(broker, tp, [b"a", b"b", b"c"])

            def all_tiered() -> bool:
                rows = broker.store.segments(tp)
                return bool(rows) and rows[-1].end_offset == 2

            await _until(all_tiered, "the tail tiered by age")
            assert _covered(broker.store.segments(tp)) == 3
            await _produce(broker, tp, [b"d", b"e"])
            await _until(lambda: _covered(broker.store.segments(tp)) == 5, "the next tail tiered")
            assert await _consume(broker, tp, 5) == [b"a", b"b", b"c", b"d", b"e"]
            assert broker.store.file_usage().keys() == {r.object_key for r in broker.store.segments(tp)}
            assert broker.store.check() == []

    asyncio.run(main())


class SlowSegmentStore(LocalDirStore):
    """Tiered PUTs take a while; counts how many run at once."""

    def __init__(self, root: Path) -> None:
        super().__init__(root, fsync=False)
        self.in_flight = 0
        self.most_in_flight = 0
        self._lock = threading.Lock()

    def put(self, key: str, data: bytes) -> None:
        if not key.startswith("tiered/"):
            super().put(key, data)
            return
        with self._lock:
            self.in_flight += 1
            self.most_in_flight = max(self.most_in_flight, self.in_flight)
        try:
            time.sleep(0.05)
            super().put(key, data)
        finally:
            with self._lock:
                self.in_flight -= 1


@pytest.mark.timeout(120)
def test_partitions_are_built_a_few_at_a_time(tmp_path: Path) -> None:
    """Six partitions with a segment each to build: the loop uploads
    several at once, never more than SEGMENT_BUILDS_IN_FLIGHT_MAX."""

    async def main() -> None:
        objects = SlowSegmentStore(tmp_path / "objects")
        async with _one_broker(tmp_path, objects, partitions=6) as (broker, topic, _):
            tps = [TopicIdPartition(topic.topic_id, p) for p in range(6)]
            for tp in tps:
                await _produce(broker, tp, [b"x" * 100] * 5)
            broker.alter_topic_configs(topic.topic_id, {"remote.storage.enable": "true", "segment.ms": 1})
            await _until(lambda: all(_covered(broker.store.segments(tp)) == 5 for tp in tps), "every partition tiered")
            assert 2 <= objects.most_in_flight <= SEGMENT_BUILDS_IN_FLIGHT_MAX
            for tp in tps:
                assert await _consume(broker, tp, 5) == [b"x" * 100] * 5
            assert broker.store.check() == []

    asyncio.run(main())


@pytest.mark.timeout(60)
def test_nothing_is_tiered_without_the_config(tmp_path: Path) -> None:
    async def main() -> None:
        objects = RecordingStore(tmp_path / "objects")
        async with _one_broker(tmp_path, objects) as (broker, topic, tp):
            broker.alter_topic_configs(topic.topic_id, {"segment.ms": 1})
            await _produce(broker, tp, [b"x"] * 20)
            await asyncio.sleep(0.3)
            assert not broker.tiering.started
            assert broker.store.segments(tp) == []
            assert not list(iter_objects(objects, "tiered/"))
            assert broker.metrics.tiered_segments._value.get() == 0

    asyncio.run(main())


@pytest.mark.timeout(120)
def test_a_failed_upload_is_retried_under_a_new_key(tmp_path: Path) -> None:
    async def main() -> None:
        objects = RecordingStore(tmp_path / "objects")
        async with _one_broker(tmp_path, objects) as (broker, topic, tp):
            await _produce(broker, tp, [b"p", b"q", b"r"])
            # The first attempt's .index goes up, its .timeindex fails; the
            # second attempt fails at once; the third succeeds.
            objects.puts.clear()
            real_put = RecordingStore.put
            calls = [0]

            def flaky(self: RecordingStore, key: str, data: bytes) -> None:
                if key.startswith("tiered/"):
                    calls[0] += 1
                    if calls[0] in (2, 3):
                        raise OSError(f"injected: PUT {key} refused")
                real_put(self, key, data)

            objects.put = flaky.__get__(objects)  # type: ignore[method-assign]
            broker.alter_topic_configs(topic.topic_id, {"remote.storage.enable": "true", "segment.ms": 1})
            await _until(lambda: _covered(broker.store.segments(tp)) == 3, "the retried segment swapped")
            [row] = broker.store.segments(tp)
            assert broker.metrics.tiered_upload_errors._value.get() == 2
            assert broker.metrics.tiered_swaps.labels(outcome="ok")._value.get() == 1
            assert all(n == 1 for n in objects.puts.values())  # no key written twice
            tiered = [o.key for o in iter_objects(objects, "tiered/")]
            # The failed attempt left an index without a .log (an orphan for
            # walmgr's future gate); the swapped segment is complete.
            assert sum(k.endswith(".log") for k in tiered) == 1 and row.object_key in tiered
            assert len(tiered) == 4
            assert await _consume(broker, tp, 3) == [b"p", b"q", b"r"]

    asyncio.run(main())


@pytest.mark.timeout(120)
def test_a_restart_between_upload_and_swap_resumes_and_leaves_an_orphan(tmp_path: Path) -> None:
    async def main() -> None:
        meta = StaticMetadata.generate(azs=1, brokers_per_az=1, topics={"t": 1})
        objects = RecordingStore(tmp_path / "objects")
        broker = _broker(tmp_path, meta, objects)
        await broker.start()
        broker.set_metadata(meta.with_ports({1: broker.port}))
        [topic] = meta.topics()
        tp = TopicIdPartition(topic.topic_id, 0)
        uploaded = threading.Event()
        release = threading.Event()
        swaps: list[SegmentSwap] = []

        class Stuck:
            """The store as the loop sees it, but its swap never reaches the
            real one: the broker dies between upload and swap."""

            def __getattr__(self, name: str) -> Any:
                return getattr(broker.store, name)

            def swap_to_segment(self, req: SegmentSwap) -> SegmentSwapResult:
                swaps.append(req)
                uploaded.set()
                release.wait(30)
                raise OSError("the broker died")

        try:
            await _produce(broker, tp, [b"k1", b"k2"])
            broker.tiering.store = Stuck()  # type: ignore[assignment]
            broker.alter_topic_configs(topic.topic_id, {"remote.storage.enable": "true", "segment.ms": 1})
            await _until(uploaded.is_set, "the first upload")
        finally:
            stopping = asyncio.ensure_future(broker.stop())
            await asyncio.sleep(0.05)
            release.set()
            await stopping
        [orphan] = swaps
        assert objects.head(orphan.object_key).size == orphan.size

        # The next leader run: the config is in the store, so the loop starts with the broker.
        broker = _broker(tmp_path, meta, objects)
        await broker.start()
        broker.set_metadata(meta.with_ports({1: broker.port}))
        try:
            assert broker.tiering.started
            await _until(lambda: _covered(broker.store.segments(tp)) == 2, "the segment swapped after the restart")
            [row] = broker.store.segments(tp)
            assert row.object_key != orphan.object_key
            assert broker.store.referenced_files({orphan.object_key, row.object_key}) == {row.object_key}
            assert objects.head(orphan.object_key).size == orphan.size  # an orphan, left for walmgr's gate
            assert all(n == 1 for n in objects.puts.values())
            assert broker.store.check() == []
            assert await _consume(broker, tp, 2) == [b"k1", b"k2"]
        finally:
            await broker.stop()

    asyncio.run(main())


@pytest.mark.timeout(120)
def test_a_segment_past_the_swap_deadline_is_refused_and_left_as_an_orphan(tmp_path: Path) -> None:
    """The leader's store refuses a segment whose key's created_ms is past
    the swap deadline (here: the store's clock runs ahead of the builder's,
    as if the upload had taken that long); the loop leaves the upload as an
    orphan nothing references, and tiers the range under a new key once
    the clocks agree."""

    async def main() -> None:
        meta = StaticMetadata.generate(azs=1, brokers_per_az=1, topics={"t": 1})
        objects = RecordingStore(tmp_path / "objects")
        broker = _broker(tmp_path, meta, objects)
        await broker.start()
        broker.set_metadata(meta.with_ports({1: broker.port}))
        [topic] = meta.topics()
        tp = TopicIdPartition(topic.topic_id, 0)
        try:
            await _produce(broker, tp, [b"k1", b"k2"])
            store_clock = broker.store._clock  # read by swap_to_segment only (commits have their own)
            late = SEGMENT_SWAP_DEADLINE_MS_DEFAULT + 60_000
            broker.store._clock = lambda: store_clock() + late
            broker.alter_topic_configs(topic.topic_id, {"remote.storage.enable": "true", "segment.ms": 1})
            refused = broker.metrics.tiered_swaps.labels(outcome="commit_deadline_exceeded")
            await _until(lambda: refused._value.get() >= 1, "a swap refused past the deadline")
            orphans = {k for k in objects.puts if k.endswith(".log")}
            assert orphans and broker.store.segments(tp) == []
            assert broker.store.referenced_files(orphans) == set()
            broker.store._clock = store_clock
            await _until(lambda: _covered(broker.store.segments(tp)) == 2, "the range swapped under a new key")
            [row] = broker.store.segments(tp)
            assert row.object_key not in orphans
            assert parse_segment_key(row.object_key).created_ms <= store_clock()
            for key in orphans:  # each an orphan, for walmgr's gate: old enough, referenced by nothing
                assert objects.head(key).size > 0
                assert store_clock() + late - parse_segment_key(key).created_ms > SEGMENT_SWAP_DEADLINE_MS_DEFAULT
            assert broker.store.referenced_files(orphans) == set()
            assert broker.store.check() == []
            assert await _consume(broker, tp, 2) == [b"k1", b"k2"]
        finally:
            await broker.stop()

    asyncio.run(main())


@pytest.mark.timeout(180)
def test_segments_on_seaweedfs(tmp_path: Path, s3_bucket: S3Store) -> None:
    async def main() -> None:
        meta = StaticMetadata.generate(azs=1, brokers_per_az=1, topics={"t": 1})
        broker = _broker(tmp_path, meta, s3_bucket)
        await broker.start()
        broker.set_metadata(meta.with_ports({1: broker.port}))
        try:
            [topic] = meta.topics()
            tp = TopicIdPartition(topic.topic_id, 0)
            broker.alter_topic_configs(
                topic.topic_id, {"remote.storage.enable": "true", "segment.bytes": MiB, "segment.ms": 500}
            )
            values = [f"{i:05d}".encode() * 1000 for i in range(250)]  # 5 KB each, ~1.25 MB
            await _produce(broker, tp, values)
            # One segment closed by size, then the rest by age.
            await _until(lambda: _covered(broker.store.segments(tp)) == 250, "everything tiered", 60)
            rows = broker.store.segments(tp)
            assert len(rows) >= 2 and all(r.size <= MiB for r in rows)
            for r in rows:
                assert s3_bucket.head(r.object_key).size == r.size
            assert broker.store.file_usage().keys() == {r.object_key for r in rows}
            assert await _consume(broker, tp, 250) == values
        finally:
            await broker.stop()

    asyncio.run(main())
