"""A produce answer lost after the leader took the batch, while later
batches of the partition were acknowledged (issue 14, found by the
deterministic simulation, seed 2).

In partlog the AZ representative commits to the leader on the producer's
behalf; when the commit's reply is lost it answers the producer
REQUEST_TIMED_OUT, though the batch is in the log, and it goes on committing
the producer's later batches.  The retry then falls outside the leader's
5-batch idempotence window and is refused OUT_OF_ORDER_SEQUENCE_NUMBER: the
producer retried it for ever.  A leader takes a producer's sequences only in
order, so a later batch acknowledged with acks=all proves this one committed
before it: the producer completes it with offset -1, as Kafka's producer
does for DUPLICATE_SEQUENCE_NUMBER.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from partlog.broker.server import Broker, BrokerConfig
from partlog.client.consumer import Consumer
from partlog.client.producer import Producer, _Batch, _written_before
from partlog.controller.cluster_meta import StaticMetadata
from partlog.kafka.errors import Errors
from partlog.kafka.records import TopicIdPartition
from partlog.produce.pipeline import ProduceConfig
from partlog.wal.localdir_store import LocalDirStore


def test_written_before_understands_wrapped_sequences() -> None:
    def batch(base: int, n: int) -> _Batch:
        return _Batch(TopicIdPartition.__new__(TopicIdPartition), b"", [None] * n, base, 0.0)  # type: ignore[list-item]

    assert _written_before(batch(1, 1), 7) and _written_before(batch(5, 3), 7)
    assert not _written_before(batch(7, 2), 7) and not _written_before(batch(8, 1), 7)
    assert not _written_before(batch(1, 1), None) and not _written_before(batch(-1, 1), 7)
    top = (1 << 31) - 1
    assert _written_before(batch(top - 1, 2), 3)  # acknowledged past the wrap
    assert not _written_before(batch(2, 1), top)  # 2 comes after the wrap


@pytest.mark.timeout(120)
def test_a_retry_past_the_window_of_an_acknowledged_successor_completes(tmp_path: Path) -> None:
    async def main() -> None:
        objects = LocalDirStore(tmp_path / "objects", fsync=False)
        meta = StaticMetadata.generate(azs=1, brokers_per_az=1, topics={"t": 1})
        broker = Broker(
            BrokerConfig(1, "az1", str(tmp_path / "b1"), sync=False, produce=ProduceConfig(commit_interval_ms=5)),
            meta,
            objects,
        )
        await broker.start()
        meta = meta.with_ports({1: broker.port})
        broker.set_metadata(meta)
        assert broker._server is not None
        real = broker._server.handlers["produce"]
        successors_acked = asyncio.Event()
        lose_next = [False]

        async def lossy(body: Any) -> Any:
            answer = await real(body)  # the leader takes the batch ...
            if lose_next[0]:
                lose_next[0] = False
                # ... but its answer is lost until later batches are
                # acknowledged; the representative then reports a timeout.
                await asyncio.wait_for(successors_acked.wait(), 30)
                for r in answer["results"]:
                    r[0] = int(Errors.REQUEST_TIMED_OUT)
            return answer

        broker._server.handlers["produce"] = lossy
        try:
            [topic] = meta.topics()
            tp = TopicIdPartition(topic.topic_id, 0)
            producer = Producer(("127.0.0.1", broker.port), linger_ms=1, retry_backoff_ms=10)
            await producer.start()
            assert (await producer.send(tp, b"r0")).offset == 0  # the leader knows us
            lose_next[0] = True
            lost = producer.send(tp, b"r1")
            while lose_next[0]:
                await asyncio.sleep(0.005)
            later = []
            for i in range(2, 9):  # more than the 5-batch window
                later.append(await producer.send(tp, f"r{i}".encode()))
            successors_acked.set()
            md = await asyncio.wait_for(lost, 30)
            assert md.offset == -1  # acknowledged; where is unknown
            assert [m.offset for m in later] == list(range(2, 9))
            await producer.close()

            consumer = Consumer(("127.0.0.1", broker.port), max_wait_ms=50)
            await consumer.start()
            consumer.assign([tp])
            values: list[bytes | None] = []
            while len(values) < 9:
                values += [r.value for r in await consumer.poll()]
            await consumer.close()
            assert values == [f"r{i}".encode() for i in range(9)]  # r1 once, in place
        finally:
            await broker.stop()

    asyncio.run(main())
