"""Compacted topics end to end (docs/design/compaction.md): a real Kafka
client (confluent-kafka) against a broker whose objects live on SeaweedFS.
Keyed records and tombstones go in; the builder loop tiers them, the
cleaner rewrites the segments; a consumer from the beginning reads the
latest value per key at offsets strictly increasing, and a keyless record
is refused with INVALID_RECORD, as Kafka does; for each of Kafka's codecs
the producer may use (librdkafka's lz4, zstd and snappy are cleaned as
gzip and uncompressed batches are)."""

from __future__ import annotations

import asyncio
import threading
import time
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest

from partlog.broker.server import Broker, BrokerConfig
from partlog.client.producer import Producer
from partlog.controller.cluster_meta import StaticMetadata
from partlog.kafka.records import TopicIdPartition
from partlog.produce.pipeline import ProduceConfig
from partlog.replication.config import ReplicationConfig
from partlog.tools.cluster_options import ClusterOptions
from partlog.tools.local_cluster import LocalCluster
from partlog.wal.localdir_store import LocalDirStore
from partlog.wal.s3_store import S3Store

confluent_kafka = pytest.importorskip("confluent_kafka")

TOPIC = "compacted"
KEYS = 20
ROUNDS = 2
PER_ROUND = 300


class _Cluster:
    """One broker with a Kafka listener on an event loop in a thread."""

    def __init__(self, data_dir: str, store: S3Store) -> None:
        opts = ClusterOptions(
            azs=1, brokers_per_az=1, partitions=1, walmgr=False, sync=False, commit_interval_ms=20, replication_factor=1
        )
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.cluster = LocalCluster(opts, data_dir, store)
        self.call(self.cluster.start())

    def call(self, coro: Any, timeout: float = 60.0) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def close(self) -> None:
        try:
            self.call(self.cluster.stop())
        finally:
            self.loop.call_soon_threadsafe(self.loop.stop)
            self.thread.join(10)
            self.loop.close()


@pytest.fixture
def cluster(tmp_path: Any, s3_bucket: S3Store) -> Iterator[_Cluster]:
    c = _Cluster(str(tmp_path), s3_bucket)
    try:
        yield c
    finally:
        c.close()


@pytest.mark.timeout(240)
@pytest.mark.parametrize("compression", ["none", "lz4", "zstd", "snappy"])
def test_compacted_topic_reads_latest_per_key(cluster: _Cluster, compression: str) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

    bootstrap = cluster.cluster.kafka_bootstrap()
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for f in admin.create_topics([NewTopic(TOPIC, 1, 1)]).values():
        f.result(30)
    [broker] = cluster.cluster.brokers.values()
    topic_id = next(t.topic_id for t in broker.metadata.topics() if t.name == TOPIC)
    tp = TopicIdPartition(topic_id, 0)

    async def alter() -> None:
        broker.alter_topic_configs(
            topic_id,
            {
                "cleanup.policy": "compact",
                "segment.ms": 300,
                "min.cleanable.dirty.ratio": "0.01",
                "delete.retention.ms": 60_000,
            },
        )

    cluster.call(alter())
    assert broker.tiering.started  # compact implies tiering

    producer = confluent_kafka.Producer(
        {"bootstrap.servers": bootstrap, "linger.ms": 5, "compression.type": compression}
    )
    errors: list[Any] = []
    latest: dict[bytes, bytes | None] = {}
    n = 0
    for r in range(ROUNDS):
        for i in range(PER_ROUND):
            key = b"k%02d" % (i % KEYS)
            value: bytes | None = b"r%d-%d" % (r, i)
            if r == ROUNDS - 1 and i >= PER_ROUND - 5:
                value = None  # a tombstone for the last five keys written
            producer.produce(TOPIC, value=value, key=key)
            latest[key] = value
            n += 1
        producer.flush(30)
        time.sleep(0.5)  # a segment per round (segment.ms)
    # A record without a key is refused on a compacted topic, whatever its codec.
    producer.produce(TOPIC, value=b"no key", on_delivery=lambda err, _msg: errors.append(err))
    producer.flush(30)
    assert len(errors) == 1 and errors[0] is not None
    assert errors[0].code() == confluent_kafka.KafkaError.INVALID_RECORD
    # Re-write the newest keyed record so the log ends with a keyed one.
    producer.produce(TOPIC, value=latest[b"k00"], key=b"k00")
    producer.flush(30)
    n += 1
    hwm = broker.store.high_watermark(tp)
    assert hwm == n

    removed = broker.metrics.cleaner_records_removed
    want_removed = n - len(latest)
    deadline = time.monotonic() + 90
    while removed._value.get() < want_removed and time.monotonic() < deadline:
        time.sleep(0.2)
    assert removed._value.get() == want_removed, (removed._value.get(), want_removed)
    assert broker.metrics.cleaner_errors._value.get() == 0
    assert broker.store.check() == []
    rows = broker.store.segments(tp)
    assert rows[-1].end_offset == hwm - 1
    assert broker.store.file_usage().keys() == {r.object_key for r in rows}

    consumer = confluent_kafka.Consumer(
        {"bootstrap.servers": bootstrap, "group.id": "g", "auto.offset.reset": "earliest", "enable.auto.commit": False}
    )
    consumer.assign([confluent_kafka.TopicPartition(TOPIC, 0, 0)])
    got: list[tuple[int, bytes, bytes | None]] = []
    deadline = time.monotonic() + 60
    while (not got or got[-1][0] < hwm - 1) and time.monotonic() < deadline:
        msg = consumer.poll(0.5)
        if msg is not None and msg.error() is None:
            got.append((msg.offset(), msg.key(), msg.value()))
    consumer.close()
    offsets = [o for o, _, _ in got]
    assert offsets == sorted(set(offsets)) and offsets[-1] == hwm - 1
    # One record per key, the latest; tombstones stay (delete.retention.ms not passed).
    assert len(got) == len(latest)
    assert {k: v for _, k, v in got} == latest


@asynccontextmanager
async def _broker(tmp_path: Path, objects: LocalDirStore) -> AsyncIterator[tuple[Broker, uuid.UUID, TopicIdPartition]]:
    """One started broker (builder period 20 ms) leading topic "t"'s one partition."""
    meta = StaticMetadata.generate(azs=1, brokers_per_az=1, topics={"t": 1})
    config = BrokerConfig(
        1, "az1", str(tmp_path / "b1"), sync=False, produce=ProduceConfig(commit_interval_ms=5),
        tiering_interval_ms=20,
        # References are asserted gone as soon as they move (no release grace).
        replication=ReplicationConfig(release_grace_ms=0),
    )  # fmt: skip
    broker = Broker(config, meta, objects)
    await broker.start()
    broker.set_metadata(meta.with_ports({1: broker.port}))
    try:
        [topic] = meta.topics()
        yield broker, topic.topic_id, TopicIdPartition(topic.topic_id, 0)
    finally:
        await broker.stop()


async def _produce_keyed(broker: Broker, tp: TopicIdPartition, first: int, n: int, keys: int) -> None:
    producer = Producer(("127.0.0.1", broker.port), linger_ms=2)
    await producer.start()
    await asyncio.gather(*[producer.send(tp, b"v%d" % i, key=b"k%d" % (i % keys)) for i in range(first, first + n)])
    await producer.close()


async def _until(check: Callable[[], bool]) -> bool:
    for _ in range(1500):  # bounded: 30 s
        if check():
            return True
        await asyncio.sleep(0.02)
    return check()


@pytest.mark.timeout(120)
def test_a_corrupt_segment_fails_the_pass_and_swaps_nothing(tmp_path: Path) -> None:
    async def main() -> None:
        objects = LocalDirStore(tmp_path / "objects", fsync=False)
        async with _broker(tmp_path, objects) as (broker, topic_id, tp):
            # Tiered, not cleanable yet (min.compaction.lag.ms).
            lag: dict[str, str | int] = {
                "cleanup.policy": "compact",
                "segment.ms": 100,
                "min.compaction.lag.ms": 10**12,
            }
            broker.alter_topic_configs(topic_id, lag)
            await _produce_keyed(broker, tp, 0, 30, 3)
            assert await _until(lambda: _tiered_to(broker, tp) == 29)
            rows = broker.store.segments(tp)
            # One byte inside the first record flipped: the CRC no longer matches.
            data = bytearray(objects.get(rows[0].object_key))
            data[70] ^= 0xFF
            objects.put(rows[0].object_key, bytes(data))
            broker.alter_topic_configs(topic_id, {"min.compaction.lag.ms": 0})
            assert await _until(lambda: broker.metrics.cleaner_errors._value.get() > 0)
            assert broker.metrics.cleaner_bytes_written._value.get() == 0
            assert broker.store.segments(tp) == rows
            assert broker.store.check() == []

    asyncio.run(main())


@pytest.mark.timeout(120)
def test_max_compaction_lag_cleans_below_the_dirty_ratio(tmp_path: Path) -> None:
    async def main() -> None:
        objects = LocalDirStore(tmp_path / "objects", fsync=False)
        async with _broker(tmp_path, objects) as (broker, topic_id, tp):
            configs: dict[str, str | int] = {"cleanup.policy": "compact", "segment.ms": 100}
            broker.alter_topic_configs(topic_id, {**configs, "min.cleanable.dirty.ratio": "1"})
            removed = broker.metrics.cleaner_records_removed._value
            await _produce_keyed(broker, tp, 0, 30, 3)
            # All dirty: ratio 1 is met; 27 superseded records go.
            assert await _until(lambda: removed.get() == 27)
            await _produce_keyed(broker, tp, 30, 30, 3)
            assert await _until(lambda: _tiered_to(broker, tp) == 59)
            runs = broker.metrics.cleaner_runs._value.get()
            await asyncio.sleep(0.3)  # periods pass: half dirty is below ratio 1
            assert broker.metrics.cleaner_runs._value.get() == runs and removed.get() == 27
            broker.alter_topic_configs(topic_id, {"max.compaction.lag.ms": 1})
            assert await _until(lambda: removed.get() == 57)  # all but the last per key
            assert broker.store.check() == []

    asyncio.run(main())


def _tiered_to(broker: Broker, tp: TopicIdPartition) -> int:
    rows = broker.store.segments(tp)
    return rows[-1].end_offset if rows else -1
