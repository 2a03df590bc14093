"""The producer's batching under load, against a real broker on loopback."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from partlog.broker.server import Broker, BrokerConfig
from partlog.client.producer import Producer
from partlog.controller.cluster_meta import StaticMetadata
from partlog.kafka.records import TopicIdPartition
from partlog.produce.pipeline import ProduceConfig
from partlog.wal.localdir_store import LocalDirStore


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
