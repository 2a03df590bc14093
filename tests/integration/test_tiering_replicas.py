"""The builder loop's swaps (main's partlog.broker.tiering) reach every
replica through replica fetches: three brokers, RF 3."""

from __future__ import annotations

from pathlib import Path

from partlog.client.producer import Producer
from partlog.replication.config import ReplicationConfig
from tests.cluster_helpers import check_exactly_once, consume_all, produce
from tests.integration.test_replica_segments import placement, read_through, three_replicas
from tests.integration.test_replication import converged, run_async, until


@run_async
async def test_the_builder_loops_swaps_reach_every_replica(tmp_path: Path) -> None:
    async with three_replicas(tmp_path, ReplicationConfig(replica_fetch_backoff_ms=50)) as r:
        tp, brokers, leader = r.tp, r.brokers, r.leader
        for b in brokers:
            b.alter_topic_configs(tp.topic_id, {"remote.storage.enable": "true", "segment.ms": 200})
        producer = Producer(("127.0.0.1", leader.port), az="az1", linger_ms=2)
        await producer.start()
        try:
            sent = await produce([producer], [tp], 600)
        finally:
            await producer.close()

        # Everything below the HWM tiered (segment.ms closes the tail), so no
        # swap can land between the checks below: under CI's load one did, and
        # the leader's placement moved after the rows were compared.
        def all_tiered() -> bool:
            rows = leader.store.segments(tp)
            return bool(rows) and rows[-1].end_offset == leader.store.high_watermark(tp) - 1

        await until(all_tiered, "the leader to tier everything below its HWM")
        await until(lambda: converged(brokers, tp), "the replicas to converge")
        await until(
            lambda: all(b.store.segments(tp) == leader.store.segments(tp) for b in brokers), "the rows to agree"
        )
        for b in brokers:
            assert placement(b, tp) == placement(leader, tp)
            assert b.store.file_usage() == leader.store.file_usage()
            assert b.store.check() == []
        values = await read_through(leader, tp)
        for b in brokers:
            assert await read_through(b, tp) == values
        seen = await consume_all(("127.0.0.1", leader.port), [tp], sent)
        check_exactly_once(sent, seen)
