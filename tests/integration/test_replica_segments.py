"""Tiered-segment swaps reach every replica through replica fetches
(issue 31): real brokers on loopback, RF 3, a LocalDirStore.

The test builds the segment by hand on the leader, as the leader's tiering
loop will: the WAL bytes of a range of whole committed batches,
concatenated, put under a ``tiered/`` key, then ``swap_to_segment``.  Every
follower then gets the leader's row and swaps too; until one has, it still
references the WAL objects (shown deterministically with a follower cut
off from the leader); a follower that catches up later receives entries
that name the segment already, and the row.
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

from prometheus_client import generate_latest

from partlog.broker.server import Broker
from partlog.kafka.errors import Errors
from partlog.kafka.record_batch import parse_records
from partlog.kafka.records import FindBatchRequest, TopicIdPartition
from partlog.replication.config import ReplicationConfig
from partlog.store import SegmentSwap
from partlog.wal.localdir_store import LocalDirStore
from partlog.wal.objectstore import ObjectStore
from tests.cluster_helpers import running_cluster, topic_partitions
from tests.integration.test_replication import by_id, converged, cut_off, produce_one, run_async, until

BIG = 1 << 30


def placement(b: Broker, tp: TopicIdPartition) -> list[tuple[int, str, int, int]]:
    """(base offset, object key, position, size) of every committed batch."""
    [r] = b.store.find_batches([FindBatchRequest(tp, b.store.log_start_offset(tp), BIG)], BIG)
    assert r.errors == Errors.NONE
    return [(x.metadata.base_offset, x.object_key, x.metadata.byte_offset, x.metadata.byte_size) for x in r.batches]


def build_segment(b: Broker, objects: ObjectStore, tp: TopicIdPartition, batches: int) -> SegmentSwap:
    """The leader's first ``batches`` committed batches as one segment object,
    put, and the swap that makes the log name it."""
    [r] = b.store.find_batches([FindBatchRequest(tp, b.store.log_start_offset(tp), BIG)], BIG)
    chosen = r.batches[:batches]
    assert len(chosen) == batches and chosen[-1].metadata.last_offset < b.store.high_watermark(tp)
    data = b"".join(objects.get_range(x.object_key, x.metadata.byte_offset, x.metadata.byte_size) for x in chosen)
    key = f"tiered/{uuid.uuid4().hex}.log"
    objects.put(key, data)
    first, last = chosen[0].metadata, chosen[-1].metadata
    return SegmentSwap(tp, first.base_offset, last.last_offset, key, len(data), b.broker_id)


async def read_through(b: Broker, tp: TopicIdPartition) -> list[tuple[int, bytes | None]]:
    """Every record of ``tp`` as broker ``b`` serves it (any replica serves
    fetches up to its HWM), from the log start: (offset, value)."""
    out: list[tuple[int, bytes | None]] = []
    offset = b.store.log_start_offset(tp)
    while offset < b.store.high_watermark(tp):
        body = await b.fetch([FindBatchRequest(tp, offset, BIG)], max_wait_ms=0, min_bytes=0, max_bytes=BIG)
        [[error, _hwm, _lso, records, *_]] = body["partitions"]
        assert error == Errors.NONE, body
        got = parse_records(tp, records, offset)
        assert got
        out.extend((rec.offset, rec.value) for rec in got)
        offset = got[-1].offset + 1
    return out


@dataclass(frozen=True, slots=True)
class Replicas:
    objects: LocalDirStore
    tp: TopicIdPartition
    brokers: list[Broker]
    leader: Broker
    followers: tuple[Broker, Broker]


@contextlib.asynccontextmanager
async def three_replicas(tmp_path: Path, cfg: ReplicationConfig) -> AsyncIterator[Replicas]:
    """Three brokers, one partition replicated on all of them."""
    objects = LocalDirStore(tmp_path / "objects")
    async with running_cluster(tmp_path, objects, partitions=1, replication_factor=3, replication=cfg) as (
        brokers,
        meta,
    ):
        [tp] = topic_partitions(meta)
        leader = by_id(brokers)[meta.partition(tp).leader]  # type: ignore[union-attr]
        near, far = (x for x in brokers if x is not leader)
        yield Replicas(objects, tp, brokers, leader, (near, far))


@run_async
async def test_a_leaders_swap_reaches_every_replica(tmp_path: Path) -> None:
    async with three_replicas(tmp_path, ReplicationConfig(replica_fetch_backoff_ms=50)) as r:
        objects, tp, brokers, leader, (near, far) = r.objects, r.tp, r.brokers, r.leader, r.followers
        values = [f"v{i}".encode() for i in range(8)]
        for v in values:
            assert await produce_one(leader, tp, -1, v) == Errors.NONE
        await until(lambda: converged(brokers, tp), "the replicas to converge")
        # ``far`` stops fetching: once one of its fetches failed, none is in
        # flight (its loop is sequential), so it cannot learn the swap.
        errors = far.replicas.stats.replica_fetch_errors
        heal = cut_off(far, {leader.broker_id})
        await until(lambda: far.replicas.stats.replica_fetch_errors > errors, "far's fetches to fail")

        swap = build_segment(leader, objects, tp, 6)
        kept = {key for base, key, _, _ in placement(leader, tp) if base > swap.end_offset}
        wal = {key for base, key, _, _ in placement(leader, tp) if base <= swap.end_offset} - kept
        assert wal and swap.object_key not in wal
        got = leader.store.swap_to_segment(swap)
        assert (got.error, got.moved) == (Errors.NONE, 6), got
        assert leader.store.referenced_files(wal) == set()

        def swapped(x: Broker) -> bool:
            return x.store.segments(tp) == leader.store.segments(tp)

        await until(lambda: swapped(near), "near to swap")
        assert near.store.referenced_files(wal) == set()
        # The ordering: far has not swapped, and references every WAL object still.
        assert far.store.segments(tp) == []
        assert far.store.referenced_files(wal) == wal
        heal()
        await until(lambda: swapped(far), "far to swap")
        for x in brokers:
            assert placement(x, tp) == placement(leader, tp)
            assert x.store.referenced_files(wal) == set()
            assert x.store.referenced_files(kept) == kept
            assert x.store.file_usage() == leader.store.file_usage()
            assert x.store.check() == []
        moved = [row for row in placement(leader, tp) if row[0] <= swap.end_offset]
        assert {key for _, key, _, _ in moved} == {swap.object_key}
        positions = [pos for _, _, pos, _ in moved]
        assert positions == [sum(size for *_, size in moved[:i]) for i in range(len(moved))]
        # A consumer reading through a follower gets every record, identical.
        through_leader = await read_through(leader, tp)
        assert [v for _, v in through_leader] == values
        assert await read_through(near, tp) == through_leader == await read_through(far, tp)
        for x in (near, far):
            assert x.replicas.stats.segment_swaps_applied == 1
            assert x.replicas.stats.segment_swaps_failed == 0
            assert "partlog_replication_segment_swaps_applied_total 1.0" in generate_latest(x.metrics.registry).decode()
        assert leader.replicas.stats.segment_swaps_sent >= 2


@run_async
async def test_a_replica_that_catches_up_later_gets_entries_naming_the_segment_and_the_row(tmp_path: Path) -> None:
    cfg = ReplicationConfig(replica_lag_time_max_ms=300, replica_fetch_backoff_ms=50)
    async with three_replicas(tmp_path, cfg) as r:
        objects, tp, brokers, leader, (near, late) = r.objects, r.tp, r.brokers, r.leader, r.followers
        assert await produce_one(leader, tp, -1, b"v0") == Errors.NONE
        await until(lambda: converged(brokers, tp), "the replicas to converge")
        heal = cut_off(late, {leader.broker_id})
        await until(lambda: leader.replicas.isr(tp) == {leader.broker_id, near.broker_id}, "late to leave the ISR")
        values = [b"v0"] + [f"v{i}".encode() for i in range(1, 7)]
        for v in values[1:]:
            assert await produce_one(leader, tp, -1, v) == Errors.NONE
        assert late.store.log_end_offset(tp) == 1
        [(_, wal0, _, _)] = placement(late, tp)
        swap = build_segment(leader, objects, tp, 5)  # offsets 0..4: late holds 0 only
        assert leader.store.swap_to_segment(swap).error == Errors.NONE
        assert leader.store.referenced_files({wal0}) == set() and late.store.referenced_files({wal0}) == {wal0}
        await until(lambda: near.store.segments(tp) == leader.store.segments(tp), "near to swap")
        heal()
        await until(lambda: leader.replicas.isr(tp) == {x.broker_id for x in brokers}, "late to rejoin the ISR")
        # It joined only once it had every row (walmgr asks the ISR).
        assert late.store.segments(tp) == leader.store.segments(tp)
        await until(lambda: converged(brokers, tp), "late to catch up")
        for x in brokers:
            assert placement(x, tp) == placement(leader, tp)
            assert x.store.file_usage() == leader.store.file_usage()
            assert x.store.check() == []
        assert late.store.referenced_files({wal0}) == set()
        assert [v for _, v in await read_through(late, tp)] == values
        # Offset 0 moved by the swap; 1..4 came naming the segment already.
        assert late.replicas.stats.segment_swaps_applied == 1
        assert late.replicas.stats.segment_swaps_failed == 0
