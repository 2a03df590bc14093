"""Followers take their leader's cleaned segments (issue 31,
docs/design/compaction.md "Replicas"): real brokers on loopback, RF 3, a
LocalDirStore.

The leader's segment and its cleaned copy are built by hand, as the
builder and the cleaner do (the cleaner core cleans the segment's batches;
the store swaps the copy in).  One follower swapped the old segment and
then takes the cleaned one; the other, cut off, never had the old row and
takes the cleaned one over its WAL references.  Every replica ends with
the leader's rows, entries and file index, no replica references the old
segment or the WAL objects, and a consumer reading through a follower
gets the cleaned log.
"""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path

from partlog.broker.server import Broker, BrokerConfig, start_brokers
from partlog.client.producer import Producer
from partlog.controller.cluster_meta import StaticMetadata
from partlog.kafka.errors import Errors
from partlog.kafka.record_batch import build_record_batch
from partlog.kafka.records import TopicIdPartition
from partlog.produce.pipeline import ProduceConfig
from partlog.replication.config import ReplicationConfig
from partlog.store.compaction import SegmentRewrite
from partlog.tiered.cleaner import OffsetMap, build_offset_map, clean_batch, split_batches
from partlog.wal.localdir_store import LocalDirStore
from partlog.wal.objectstore import ObjectStore
from tests.cluster_helpers import topic_partitions
from tests.integration.test_replica_segments import build_segment, placement, read_through, three_replicas
from tests.integration.test_replication import by_id, converged, cut_off, run_async, until

T0 = 1_700_000_000_000


def clean_segment(b: Broker, objects: ObjectStore, tp: TopicIdPartition) -> SegmentRewrite:
    """The leader's cleaner by hand: its one row read, cleaned, put."""
    [row] = b.store.segments(tp)
    # The hand-built segment holds the WAL bytes: stamp the stored headers
    # (offsets and leader epoch, outside the CRC), as the builder writes them.
    headers = [e.header for e in b.store.read_log(tp, row.start_offset, 1 << 30).entries]
    raw = split_batches(objects.get_range(row.object_key, 0, row.size))
    batches = [h + x[61:] for h, x in zip(headers, raw, strict=False)]  # the log goes on past the row
    m = OffsetMap()
    build_offset_map(batches, m)
    cleaned = [clean_batch(x, m, now_ms=T0, delete_retention_ms=0).data for x in batches]
    data = b"".join(cleaned)
    assert len(data) < row.size
    key = f"tiered/{uuid.uuid4().hex}.log"
    objects.put(key, data)
    return SegmentRewrite(
        tp,
        row.start_offset,
        row.end_offset,
        key,
        len(data),
        b.broker_id,
        (row.object_key,),
        tuple(c[:61] for c in cleaned),
    )


@run_async
async def test_followers_take_the_leaders_cleaned_segment(tmp_path: Path) -> None:
    async with three_replicas(tmp_path, ReplicationConfig(replica_fetch_backoff_ms=50)) as r:
        objects, tp, brokers, leader, (near, far) = r.objects, r.tp, r.brokers, r.leader, r.followers
        for i in range(8):
            batch = build_record_batch([(b"k%d" % (i % 2), b"v%d" % i, T0 + i)])
            [got] = await leader.produce([(tp, batch)], acks=-1, timeout_ms=20_000)
            assert got.error == Errors.NONE
        await until(lambda: converged(brokers, tp), "the replicas to converge")
        wal = {key for _, key, _, _ in placement(leader, tp)}
        errors = far.replicas.stats.replica_fetch_errors
        heal = cut_off(far, {leader.broker_id})
        await until(lambda: far.replicas.stats.replica_fetch_errors > errors, "far's fetches to fail")

        swap = build_segment(leader, objects, tp, 6)
        assert leader.store.swap_to_segment(swap).error == Errors.NONE
        await until(lambda: near.store.segments(tp) == leader.store.segments(tp), "near to swap")
        rewrite = clean_segment(leader, objects, tp)
        swapped = leader.store.swap_to_segment(rewrite)
        assert swapped.error == Errors.NONE, swapped
        assert leader.store.referenced_files({swap.object_key}) == set()
        assert near.store.referenced_files({swap.object_key}) == {swap.object_key}  # until it takes it

        def same(x: Broker) -> bool:
            return x.store.segments(tp) == leader.store.segments(tp) and placement(x, tp) == placement(leader, tp)

        await until(lambda: same(near), "near to take the cleaned segment")
        heal()
        await until(lambda: same(far), "far to take the cleaned segment")
        old = {swap.object_key} | {key for base, key, _, _ in placement(leader, tp) if base <= swap.end_offset}
        tail = {key for base, key, _, _ in placement(leader, tp) if base > swap.end_offset}
        for x in brokers:
            assert x.store.file_usage() == leader.store.file_usage()
            assert x.store.read_log(tp, 0, 1 << 30).entries == leader.store.read_log(tp, 0, 1 << 30).entries
            assert x.store.referenced_files(old | wal) == (old | wal) & (tail | {rewrite.object_key})
            assert x.store.check() == []
        for x in (near, far):
            assert x.replicas.stats.segment_rewrites_applied >= 1
        # A consumer reading through a follower sees the cleaned data: the
        # latest value per key in the cleaned range, then the tail.
        through_far = await read_through(far, tp)
        assert through_far == await read_through(leader, tp)
        assert [v for _, v in through_far] == [b"v4", b"v5", b"v6", b"v7"]


@run_async
async def test_a_compacted_topic_cleaned_by_its_leader_is_cleaned_on_every_replica(tmp_path: Path) -> None:
    """The builder and the cleaner as they run (20 ms periods), RF 3."""
    objects = LocalDirStore(tmp_path / "objects", fsync=False)
    meta = StaticMetadata.generate(azs=3, brokers_per_az=1, topics={"t": 1}, replication_factor=3)
    configs = [
        BrokerConfig(
            b.broker_id,
            b.az,
            str(tmp_path / f"b{b.broker_id}"),
            sync=False,
            produce=ProduceConfig(commit_interval_ms=5),
            # References are asserted gone as soon as they move (no release grace).
            replication=ReplicationConfig(replica_fetch_backoff_ms=50, release_grace_ms=0),
            tiering_interval_ms=20,
        )
        for b in meta.brokers()
    ]
    brokers, meta = await start_brokers(configs, meta, objects)
    try:
        [tp] = topic_partitions(meta)
        leader = by_id(brokers)[meta.partition(tp).leader]  # type: ignore[union-attr]
        followers = [x for x in brokers if x is not leader]
        for x in brokers:  # each store holds the topic's configs
            x.alter_topic_configs(tp.topic_id, {"cleanup.policy": "compact", "segment.ms": 100})
        producer = Producer(("127.0.0.1", leader.port), linger_ms=2)
        await producer.start()
        try:
            await asyncio.gather(*[producer.send(tp, b"v%d" % i, key=b"k%d" % (i % 3)) for i in range(30)])
        finally:
            await producer.close()
        removed = leader.metrics.cleaner_records_removed._value
        await until(lambda: removed.get() == 27, "the leader to clean")  # all but the last per key
        await until(lambda: converged(brokers, tp), "the replicas to converge")

        def same(x: Broker) -> bool:
            return (
                x.store.segments(tp) == leader.store.segments(tp)
                and x.store.read_log(tp, 0, 1 << 30).entries == leader.store.read_log(tp, 0, 1 << 30).entries
                and x.store.file_usage() == leader.store.file_usage()
            )

        for x in followers:
            await until(lambda x=x: same(x), f"broker {x.broker_id} to take the cleaned segments")  # type: ignore[misc]
            assert x.replicas.stats.segment_rewrites_applied >= 1
            assert x.store.check() == []
        # No replica references a segment the leader let go of.
        live = set(leader.store.file_usage())
        for x in brokers:
            assert set(x.store.file_usage()) == live
        through_follower = await read_through(followers[0], tp)
        assert through_follower == await read_through(leader, tp)
        assert sorted(v or b"" for _, v in through_follower) == [b"v27", b"v28", b"v29"]
    finally:
        for x in brokers:
            await x.stop()
