"""Reads of tiered segments by a real Kafka client, on SeaweedFS: three
brokers with Kafka listeners (RF 3), a topic tiered once written.
librdkafka's ListOffsets by timestamp answers the same before and after the
swap, and its consumer reads every record once, in order, from offset 0;
the leader reads the segments in chunks (few GETs).  A replica keeps its
newest segments on disk and reads them without GETs."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from partlog.broker.server import Broker, BrokerConfig
from partlog.client.producer import Producer
from partlog.controller.cluster_meta import StaticMetadata
from partlog.kafka.records import FindBatchRequest, TopicIdPartition
from partlog.produce.pipeline import ProduceConfig
from partlog.wal.localdir_store import LocalDirStore
from partlog.wal.s3_store import S3Store
from tests.kafka_helpers import ClusterThread

confluent_kafka = pytest.importorskip("confluent_kafka")

TOPIC = "tiered-reads"
RECORDS = 600
VALUE_BYTES = 5000
MiB = 1 << 20
# An hour old: every segment's first batch is past segment.ms (1 min), so the
# tail closes too; 1 ms apart: segments roll by size, not by segment.ms.
T0 = int(time.time() * 1000) - 3_600_000


@pytest.fixture
def cluster(tmp_path: Any, s3_bucket: S3Store) -> Iterator[ClusterThread]:
    c = ClusterThread(str(tmp_path), objects=s3_bucket)
    try:
        from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

        admin = AdminClient({"bootstrap.servers": c.bootstrap})
        for f in admin.create_topics([NewTopic(TOPIC, 1, 3)]).values():
            f.result(30)
        yield c
    finally:
        c.close()


def _offsets_for_times(cluster: ClusterThread, timestamps: list[int]) -> list[int]:
    c = confluent_kafka.Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": f"t-{uuid.uuid4()}"})
    try:
        # One partition per request: Kafka refuses a partition asked twice.
        return [
            c.offsets_for_times([confluent_kafka.TopicPartition(TOPIC, 0, ts)], timeout=30)[0].offset
            for ts in timestamps
        ]
    finally:
        c.close()


def _tier(cluster: ClusterThread, tp: TopicIdPartition) -> Any:
    """Tiering on for the topic on every broker; the leader once its HWM is all tiered."""
    brokers = cluster.cluster.brokers

    configs: dict[str, str | int] = {"remote.storage.enable": "true", "segment.bytes": MiB, "segment.ms": 60_000}

    async def enable() -> None:
        for b in brokers.values():
            b.alter_topic_configs(tp.topic_id, configs)

    cluster.call(enable())
    [leader] = [b for b in brokers.values() if b.replicas.is_leader(tp)]
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        rows = leader.store.segments(tp)
        if rows and rows[-1].end_offset == leader.store.high_watermark(tp) - 1:
            return leader
        time.sleep(0.1)
    raise AssertionError(f"not tiered: {leader.store.segments(tp)}")


@pytest.mark.timeout(180)
def test_librdkafka_reads_tiered_segments_and_lists_offsets_by_time(cluster: ClusterThread) -> None:
    producer = confluent_kafka.Producer({"bootstrap.servers": cluster.bootstrap, "linger.ms": 5})
    values = [f"{i:06d}".encode() * (VALUE_BYTES // 6) for i in range(RECORDS)]
    for i, v in enumerate(values):
        producer.produce(TOPIC, v, partition=0, timestamp=T0 + i)
        producer.poll(0)
    assert producer.flush(30) == 0
    asked = [T0 - 1, T0, T0 + 1, T0 + 250, T0 + RECORDS - 1, T0 + RECORDS]
    before = _offsets_for_times(cluster, asked)
    assert before[0] == 0 and before[-1] == -1, before  # the end: no record that late

    topic_id, _ = next(iter(b.topic_index[TOPIC] for b in cluster.cluster.brokers.values()))
    tp = TopicIdPartition(topic_id, 0)
    leader = _tier(cluster, tp)
    rows = leader.store.segments(tp)
    assert len(rows) >= 2 and rows[0].start_offset == 0
    assert _offsets_for_times(cluster, asked) == before

    gets_before = leader.stats.fetch_gets
    consumer = confluent_kafka.Consumer(
        {"bootstrap.servers": cluster.bootstrap, "group.id": f"t-{uuid.uuid4()}", "enable.auto.commit": False}
    )
    consumer.assign([confluent_kafka.TopicPartition(TOPIC, 0, 0)])
    got: list[tuple[int, bytes]] = []
    deadline = time.monotonic() + 60
    try:
        while len(got) < RECORDS and time.monotonic() < deadline:
            m = consumer.poll(0.5)
            if m is None:
                continue
            assert m.error() is None, m.error()
            got.append((m.offset(), m.value()))
    finally:
        consumer.close()
    assert [o for o, _ in got] == list(range(RECORDS))
    assert [v for _, v in got] == values
    # Read in chunks of 8 MiB: one GET per segment (each under 1 MiB), not
    # one per fetch.  (A replica in the client's AZ may have served some.)
    assert leader.stats.fetch_gets - gets_before <= len(rows)


@pytest.mark.timeout(120)
def test_a_replica_keeps_its_newest_segments_on_disk_and_reads_them_without_gets(tmp_path: Path) -> None:
    """Local copies (KIP-1163's third policy): the newest segments that fit
    the partition's share are files on the broker's disk; a fetch of them
    makes no GET; older copies are deleted once newer segments take the room."""

    async def main() -> None:
        meta = StaticMetadata.generate(azs=1, brokers_per_az=1, topics={"t": 1})
        config = BrokerConfig(
            1, "az1", str(tmp_path / "b1"), sync=False, produce=ProduceConfig(commit_interval_ms=5),
            tiering_interval_ms=20, local_segment_bytes_per_partition=MiB * 5 // 2,
        )  # fmt: skip
        objects = LocalDirStore(tmp_path / "objects", fsync=False)
        broker = Broker(config, meta, objects)
        await broker.start()
        broker.set_metadata(meta.with_ports({1: broker.port}))
        [topic] = meta.topics()
        tp = TopicIdPartition(topic.topic_id, 0)
        copies = tmp_path / "b1" / "local-segments"
        try:
            broker.alter_topic_configs(topic.topic_id, {"remote.storage.enable": "true", "segment.bytes": MiB})
            producer = Producer(("127.0.0.1", broker.port), linger_ms=2, batch_bytes_max=64 << 10)
            await producer.start()

            async def write(n: int) -> None:
                await asyncio.gather(*[producer.send(tp, f"{i:05d}".encode() * 1600) for i in range(n)])

            async def newest_two_held() -> list[Any]:
                deadline = time.monotonic() + 60
                while time.monotonic() < deadline:
                    rows = broker.store.segments(tp)
                    if len(rows) >= 4 and set(broker.local_segments.held) == {r.object_key for r in rows[-2:]}:
                        return rows
                    await asyncio.sleep(0.05)
                raise AssertionError(f"held {list(broker.local_segments.held)}, rows {broker.store.segments(tp)}")

            await write(640)  # ~5 MiB: four segments of 1 MiB and a tail
            rows = await newest_two_held()
            assert len(list(copies.iterdir())) == 2  # complete files only, no temporary left
            m = broker.metrics
            assert m.local_segment_bytes._value.get() == rows[-1].size + rows[-2].size
            gets, hits = broker.stats.fetch_gets, m.local_segment_hits._value.get()
            newest = rows[-1]
            answer = await broker.fetch(
                [FindBatchRequest(tp, newest.start_offset, newest.size)], max_wait_ms=0, min_bytes=1,
                max_bytes=newest.size,
            )  # fmt: skip
            assert answer["partitions"][0][3] == objects.get(newest.object_key)
            assert broker.stats.fetch_gets == gets and m.local_segment_hits._value.get() > hits
            # The oldest segment is not held: read through the store.
            await broker.fetch([FindBatchRequest(tp, 0, 1000)], max_wait_ms=0, min_bytes=1, max_bytes=1000)
            assert broker.stats.fetch_gets == gets + 1

            await write(400)  # more segments: the copies move to the newest two
            await producer.flush()
            later = await newest_two_held()
            assert later[-1].start_offset > newest.start_offset
            assert len(list(copies.iterdir())) == 2
            assert m.local_segment_downloads._value.get() >= 4
            await producer.close()
        finally:
            await broker.stop()

    asyncio.run(main())
