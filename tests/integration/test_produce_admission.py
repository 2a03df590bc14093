"""A broker admits produce requests to its WAL buffer in arrival order,
also under back-pressure (regression: a later, smaller request could
overtake one that waited for room, so an idempotent producer's later
batches reached the leader before its earlier ones)."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

from partlog.broker.server import BrokerConfig, start_brokers
from partlog.controller.cluster_meta import StaticMetadata
from partlog.kafka.errors import Errors
from partlog.kafka.record_batch import build_record_batch
from partlog.kafka.records import TopicIdPartition
from partlog.produce.pipeline import ProduceConfig
from partlog.wal.localdir_store import LocalDirStore


def _batch(value_bytes: int) -> bytes:
    return build_record_batch([(None, b"x" * value_bytes, int(time.time() * 1000))])


def test_a_request_waiting_for_room_is_not_overtaken(tmp_path: Path) -> None:
    async def main() -> list[int]:
        meta = StaticMetadata.generate(azs=1, brokers_per_az=1, topics={"t": 1})
        config = BrokerConfig(
            1,
            "az1",
            str(tmp_path / "b1"),
            sync=False,
            produce=ProduceConfig(commit_interval_ms=300, buffer_bytes_max=3000, inflight_bytes_max=3000),
        )
        [broker], meta = await start_brokers([config], meta, LocalDirStore(tmp_path / "objects"))
        try:
            topic = meta.topics()[0]
            tp = TopicIdPartition(topic.topic_id, 0)
            admitted: list[int] = []
            real = broker.pipeline.produce

            def spy(produce_id, batches, now_ms, *, acks_all=True, urgent=False, transactional_id=None):  # type: ignore[no-untyped-def]
                admitted.append(len(batches[0][1]))
                return real(
                    produce_id, batches, now_ms, acks_all=acks_all, urgent=urgent, transactional_id=transactional_id
                )

            broker.pipeline.produce = spy  # type: ignore[method-assign]
            first = asyncio.ensure_future(broker.produce([(tp, _batch(2000))], acks=1))
            await asyncio.sleep(0.05)
            big = asyncio.ensure_future(broker.produce([(tp, _batch(1900))], acks=1))  # waits for room
            await asyncio.sleep(0.05)
            small = asyncio.ensure_future(broker.produce([(tp, _batch(100))], acks=1))  # would fit now
            results = await asyncio.gather(first, big, small)
            assert all(r.error == Errors.NONE for rs in results for r in rs), results
            return admitted
        finally:
            await broker.stop()

    admitted = asyncio.run(main())
    # Arrival order: the small request does not overtake the big one.
    assert admitted[0] > admitted[1] > admitted[2], admitted
