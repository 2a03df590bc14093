"""An idempotent producer's sequences after a batch failed for good
(found by the deterministic simulation, seed 11 at PYTHONHASHSEED=84).

While brokers crashed, the controller lost its brokers for a moment and one
metadata answer named no partition of the topic.  The producer failed every
waiting batch of the partition at once with UNKNOWN_TOPIC_OR_PARTITION, but
its sequence numbers went on from where they were: the leader, which knew the
producer, refused the next batch OUT_OF_ORDER_SEQUENCE_NUMBER, and the
producer retried it for ever.

Two fixes, one test each, against a real broker:

* a partition missing from the metadata waits for a view that names it (as
  Kafka's producers do), and fails only after ``topic_missing_ms_max``;
* a sequenced batch that fails for good bumps the partition's producer epoch
  (KIP-360) before the next batch goes out, so the leader takes it.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest

from partlog.broker.server import Broker, BrokerConfig
from partlog.client.consumer import Consumer
from partlog.client.producer import ProduceError, Producer
from partlog.controller.cluster_meta import StaticMetadata
from partlog.kafka.errors import Errors
from partlog.kafka.records import TopicIdPartition
from partlog.produce.pipeline import ProduceConfig
from partlog.wal.localdir_store import LocalDirStore

Handler = Callable[[Any], Awaitable[Any]]


def refused(error: Errors, body: Any) -> dict[str, Any]:
    return {"results": [[int(error), -1, -1, -1, None]] * len(body["batches"])}


@asynccontextmanager
async def one_broker(tmp_path: Path) -> AsyncIterator[tuple[Broker, TopicIdPartition]]:
    objects = LocalDirStore(tmp_path / "objects", fsync=False)
    meta = StaticMetadata.generate(azs=1, brokers_per_az=1, topics={"t": 1})
    broker = Broker(
        BrokerConfig(1, "az1", str(tmp_path / "b1"), sync=False, produce=ProduceConfig(commit_interval_ms=5)),
        meta,
        objects,
    )
    await broker.start()
    broker.set_metadata(meta.with_ports({1: broker.port}))
    try:
        [topic] = meta.topics()
        yield broker, TopicIdPartition(topic.topic_id, 0)
    finally:
        await broker.stop()


def wrap(broker: Broker, method: str, make: Callable[[Handler], Handler]) -> None:
    assert broker._server is not None
    broker._server.handlers[method] = make(broker._server.handlers[method])


async def read_all(broker: Broker, tp: TopicIdPartition, n: int) -> list[bytes | None]:
    consumer = Consumer(("127.0.0.1", broker.port), max_wait_ms=50)
    await consumer.start()
    consumer.assign([tp])
    values: list[bytes | None] = []
    async with asyncio.timeout(30):
        while len(values) < n:
            values += [r.value for r in await consumer.poll()]
    await consumer.close()
    return values


@pytest.mark.timeout(120)
def test_a_partition_missing_from_one_metadata_answer_waits_for_the_next(tmp_path: Path) -> None:
    async def main() -> None:
        async with one_broker(tmp_path) as (broker, tp):
            blind = [0]  # metadata answers left that name no topic
            not_leader = [False]

            def metadata(real: Handler) -> Handler:
                async def handler(body: Any) -> Any:
                    answer = await real(body)
                    if blind[0]:
                        blind[0] -= 1
                        answer = {**answer, "topics": []}
                    return answer

                return handler

            def produce(real: Handler) -> Handler:
                async def handler(body: Any) -> Any:
                    if not_leader[0]:  # the producer reloads its view
                        not_leader[0] = False
                        return refused(Errors.NOT_LEADER_OR_FOLLOWER, body)
                    return await real(body)

                return handler

            wrap(broker, "metadata", metadata)
            wrap(broker, "produce", produce)
            producer = Producer(("127.0.0.1", broker.port), linger_ms=1, retry_backoff_ms=10)
            await producer.start()
            assert (await producer.send(tp, b"r0")).offset == 0  # the leader knows us
            blind[0], not_leader[0] = 3, True
            futs = [producer.send(tp, f"r{i}".encode()) for i in range(1, 6)]
            async with asyncio.timeout(30):
                offsets = [(await f).offset for f in futs]
            assert offsets == [1, 2, 3, 4, 5]
            assert blind[0] == 0  # the blind answers were served
            assert producer.stats["errors"] == 0 and producer.stats["epoch_bumps"] == 0
            await producer.close()
            assert await read_all(broker, tp, 6) == [f"r{i}".encode() for i in range(6)]

    asyncio.run(main())


@pytest.mark.timeout(120)
def test_a_partition_missing_for_longer_than_its_bound_fails(tmp_path: Path) -> None:
    async def main() -> None:
        async with one_broker(tmp_path) as (broker, tp):
            producer = Producer(("127.0.0.1", broker.port), linger_ms=1, topic_missing_ms_max=200)
            await producer.start()
            gone = TopicIdPartition(tp.topic_id, 7)  # no such partition
            with pytest.raises(ProduceError) as e:
                async with asyncio.timeout(30):
                    await producer.send(gone, b"x")
            assert e.value.error == Errors.UNKNOWN_TOPIC_OR_PARTITION
            assert (await producer.send(tp, b"y")).offset == 0  # the rest goes on
            await producer.close()

    asyncio.run(main())


@pytest.mark.timeout(120)
def test_a_batch_failed_for_good_bumps_the_epoch_and_the_next_is_taken(tmp_path: Path) -> None:
    async def main() -> None:
        async with one_broker(tmp_path) as (broker, tp):

            def produce(real: Handler) -> Handler:
                async def handler(body: Any) -> Any:
                    if any(b"doomed" in b[2] for b in body["batches"]):
                        # Refused for good and never written: the leader never
                        # sees this batch's sequence.
                        return refused(Errors.MESSAGE_TOO_LARGE, body)
                    return await real(body)

                return handler

            wrap(broker, "produce", produce)
            # A short delivery timeout, so that without the bump the test
            # fails in seconds (the next batch refused out of order until it
            # expires) instead of hanging.
            producer = Producer(("127.0.0.1", broker.port), linger_ms=1, retry_backoff_ms=10, delivery_timeout_ms=5_000)
            await producer.start()
            assert (await producer.send(tp, b"r0")).offset == 0
            with pytest.raises(ProduceError) as e:
                await producer.send(tp, b"doomed")
            assert e.value.error == Errors.MESSAGE_TOO_LARGE
            later = [producer.send(tp, f"r{i}".encode()) for i in range(1, 4)]
            async with asyncio.timeout(30):
                offsets = [(await f).offset for f in later]
            assert offsets == [1, 2, 3]
            assert producer.stats["epoch_bumps"] == 1
            # Once bumped, the window works as before: a duplicate is still a
            # duplicate (same epoch, same sequence) and order holds.
            assert (await producer.send(tp, b"r4")).offset == 4
            await producer.close()
            assert await read_all(broker, tp, 5) == [f"r{i}".encode() for i in range(5)]

    asyncio.run(main())
