"""The brokers' side of partition reassignment on real brokers (loopback):
a replica added at the same leader epoch catches up from the leader (log
start moved, tiered segment rows) and joins the ISR; a removed one drops
its log, and starts afresh when added again.

The replicas change by handing brokers new static metadata, as the
controller pushes it (``replicas`` the union while the new ones catch up,
then the target), so each step happens exactly when the test says: the
store, the replica manager and the fetchers are the real ones.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from partlog.broker.server import Broker
from partlog.controller.cluster_meta import StaticMetadata
from partlog.kafka.errors import Errors
from partlog.kafka.records import DeleteRecordsRequest, TopicIdPartition
from partlog.replication.config import ReplicationConfig
from partlog.wal.localdir_store import LocalDirStore
from tests.cluster_helpers import running_cluster, topic_partitions
from tests.integration.test_replica_segments import build_segment, placement, read_through
from tests.integration.test_replication import by_id, converged, log_of, produce_one, run_async, until


def reassigned(
    meta: StaticMetadata, tp: TopicIdPartition, replicas: tuple[int, ...], isr: tuple[int, ...]
) -> StaticMetadata:
    """``meta`` with ``tp`` on ``replicas`` and ``isr`` at the next partition
    epoch, the leader and its epoch unchanged (as the controller adds or
    removes replicas the leader is not one of)."""
    [t] = meta.topics()
    parts = list(t.partitions)
    old = parts[tp.partition]
    assert old.leader in replicas and set(isr) <= set(replicas)
    parts[tp.partition] = replace(old, replicas=replicas, isr=isr, partition_epoch=old.partition_epoch + 1)
    return meta.with_topics([replace(t, partitions=tuple(parts))])


def same_log(a: Broker, b: Broker, tp: TopicIdPartition) -> bool:
    return (
        converged([a, b], tp)
        and a.store.log_start_offset(tp) == b.store.log_start_offset(tp)
        and a.store.segments(tp) == b.store.segments(tp)
    )


@run_async
async def test_a_replica_moves_away_and_back_from_a_log_with_a_moved_start_and_segment_rows(tmp_path: Path) -> None:
    cfg = ReplicationConfig(replica_lag_time_max_ms=2000, replica_fetch_backoff_ms=50)
    objects = LocalDirStore(tmp_path / "objects")
    async with running_cluster(
        tmp_path, objects, partitions=1, replication_factor=2, replication=cfg, release_grace_ms=60_000
    ) as (brokers, meta):
        [tp] = topic_partitions(meta)
        b = by_id(brokers)
        info = meta.partition(tp)
        assert info is not None
        leader = b[info.leader]
        old = b[next(r for r in info.replicas if r != leader.broker_id)]
        new = b[next(x for x in b if x not in info.replicas)]
        lid, oid, nid = leader.broker_id, old.broker_id, new.broker_id
        for i in range(10):
            assert await produce_one(leader, tp, -1, f"v{i}".encode()) == Errors.NONE
        await until(lambda: same_log(leader, old, tp), "the follower to converge")
        # The leader's log start moves, and its first batches go to a segment.
        [deleted] = leader.store.delete_records([DeleteRecordsRequest(tp, 2)])
        assert deleted.errors == Errors.NONE
        swap = build_segment(leader, objects, tp, 4)
        assert leader.store.swap_to_segment(swap).error == Errors.NONE
        await until(lambda: same_log(leader, old, tp), "the follower to take the log start and the rows")
        assert new.store.log_end_offset(tp) == 0  # not a replica: nothing here
        epoch = leader.replicas.leader_epoch(tp)

        # The first step: the union, target (leader, new) first; the ISR unchanged.
        union = reassigned(meta, tp, (lid, nid, oid), (lid, oid))
        for x in brokers:
            x.set_metadata(union)
        await until(lambda: same_log(leader, new, tp), "the new replica to catch up")
        await until(lambda: leader.replicas.isr(tp) == {lid, oid, nid}, "the new replica to join the ISR")
        assert leader.replicas.leader_epoch(tp) == epoch  # no leader change
        assert placement(new, tp) == placement(leader, tp)
        assert new.store.file_usage() == leader.store.file_usage()
        assert await read_through(new, tp) == await read_through(leader, tp)
        assert await produce_one(leader, tp, -1, b"during") == Errors.NONE

        # The last step: the target alone.  The old replica's metadata is
        # older at first: it keeps its log (the leader refuses its fetches).
        target = reassigned(union, tp, (lid, nid), (lid, nid))
        leader.set_metadata(target)
        new.set_metadata(target)
        await until(lambda: leader.replicas.isr(tp) == {lid, nid}, "the leader to take the target")
        assert await produce_one(leader, tp, -1, b"after") == Errors.NONE
        await until(lambda: converged([leader, new], tp), "the target to converge")
        held = old.store.file_usage()
        assert held and old.store.log_end_offset(tp) > 0 and old.replicas.stats.partitions_dropped == 0
        old.set_metadata(target)
        await until(lambda: old.replicas.stats.partitions_dropped == 1, "the old replica to drop its log")
        assert not old.replicas.serves(tp)
        assert old.store.file_usage() == {}
        assert (old.store.log_start_offset(tp), old.store.log_end_offset(tp), old.store.high_watermark(tp)) == (0, 0, 0)
        # What it released stays referenced for walmgr during the release grace.
        assert old.store.references_held(held) == set()
        assert old.store.referenced_files(held) == set(held)

        # Added again: a fresh follower, it fetches everything anew.
        again = reassigned(target, tp, (lid, nid, oid), (lid, nid))
        for x in brokers:
            x.set_metadata(again)
        await until(lambda: same_log(leader, old, tp), "the re-added replica to catch up")
        await until(lambda: leader.replicas.isr(tp) == {lid, oid, nid}, "the re-added replica to join the ISR")
        assert log_of(old, tp) == log_of(leader, tp)
        assert old.replicas.stats.partitions_dropped == 1
        for x in brokers:
            assert x.store.check() == []
