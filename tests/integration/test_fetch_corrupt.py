"""A truncated or corrupt WAL object on fetch (issue 13, item 8).

Regression: an object shorter than a batch the log points at answered
RangeNotSatisfiable, which the broker passed on as KAFKA_STORAGE_ERROR: a
retriable error, so consumers retried for ever.  Now it is CORRUPT_MESSAGE
(not retriable) naming the key and the byte offset, counted in
``partlog_fetch_corrupt_batches_total``, and the consumer raises
:class:`CorruptRecordError` instead of spinning.
"""

from __future__ import annotations

import asyncio
import os
import time
import uuid
from pathlib import Path

import pytest
from prometheus_client import generate_latest

from partlog.broker.server import BrokerConfig, start_brokers
from partlog.client.consumer import Consumer, CorruptRecordError
from partlog.controller.cluster_meta import StaticMetadata
from partlog.fetch.reads import assemble
from partlog.kafka.errors import Errors
from partlog.kafka.record_batch import build_record_batch
from partlog.kafka.records import BatchInfo, BatchMetadata, TimestampType, TopicIdPartition
from partlog.produce.pipeline import ProduceConfig
from partlog.wal.localdir_store import LocalDirStore
from partlog.wal.objectstore import RangeNotSatisfiableError


@pytest.mark.timeout(60)
@pytest.mark.parametrize("damage", ["truncate", "cut_short", "flip"])
def test_a_damaged_object_is_corrupt_message_not_a_retry(tmp_path: Path, damage: str) -> None:
    objects = LocalDirStore(tmp_path / "objects", fsync=False)

    async def main() -> None:
        meta = StaticMetadata.generate(azs=1, brokers_per_az=1, topics={"t": 1})
        cfg = BrokerConfig(1, "az1", os.path.join(tmp_path, "b1"), produce=ProduceConfig(commit_interval_ms=10),
                           sync=False)  # fmt: skip
        [broker], meta = await start_brokers([cfg], meta, objects)
        try:
            [topic] = meta.topics()
            tp = TopicIdPartition(topic.topic_id, 0)
            keys: list[str] = []
            for v in (b"first", b"second"):
                [r] = await broker.produce([(tp, build_record_batch([(None, v, int(time.time() * 1000))]))], acks=1)
                assert r.error == Errors.NONE
                keys += set(broker.store.file_usage()) - set(keys)
            first, second = keys  # one WAL object each
            path = tmp_path / "objects" / second
            data = path.read_bytes()
            if damage == "truncate":
                path.write_bytes(data[:1])  # ends before the batch starts: RangeNotSatisfiable
            elif damage == "cut_short":
                path.write_bytes(data[:40])  # ends inside the batch
            else:
                path.write_bytes(data[:30] + bytes([data[30] ^ 0xFF]) + data[31:])  # a flipped bit: CRC
            consumer = Consumer([("127.0.0.1", broker.port)])
            await consumer.start()
            consumer.assign([tp])
            got: list[bytes | None] = []
            with pytest.raises(CorruptRecordError) as e:
                for _ in range(50):
                    got += [r.value for r in await consumer.poll()]
            got += [r.value for r in e.value.records]
            assert got == [b"first"]  # everything before the damage, once
            why = e.value.partitions[tp]
            assert second in why and "at byte" in why and "offset 1" in why, why
            assert consumer.errors[tp] == Errors.CORRUPT_MESSAGE
            await consumer.close()
            assert b"partlog_fetch_corrupt_batches_total 1.0" in generate_latest(broker.metrics.registry)
            assert first
        finally:
            await broker.stop()

    asyncio.run(main())


def test_assemble_names_the_object_and_byte_of_a_truncated_read() -> None:
    tp = TopicIdPartition(uuid.uuid4(), 0)
    md = BatchMetadata(tp, 1, 61, 0, 0, -1, 0, TimestampType.CREATE_TIME, -1, -1, -1, -1)
    info = BatchInfo(1, "wal/00/k.wal", md)
    [answer] = assemble({tp: [info]}, {"wal/00/k.wal": RangeNotSatisfiableError("ends at 1", key="wal/00/k.wal")})
    assert answer.error == Errors.CORRUPT_MESSAGE and answer.error_message is not None
    assert "wal/00/k.wal at byte 1" in answer.error_message
