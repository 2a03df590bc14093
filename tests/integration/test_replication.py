"""Replication of the metadata logs between real brokers on loopback:
followers converge, acks=all waits for the ISR, the ISR shrinks and grows,
leader changes truncate a divergent suffix, stale epochs are fenced.

Leadership moves here by handing brokers new static metadata (as a
controller would push it), so each step happens exactly when the test says.
"""

from __future__ import annotations

import asyncio
import functools
import threading
import time
from collections.abc import Callable, Coroutine
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import generate_latest

from partlog import injected_bugs
from partlog.broker.server import Broker, BrokerConfig
from partlog.client.producer import Producer
from partlog.controller.cluster_meta import StaticMetadata
from partlog.controller.producer_ids import ProducerIdManager
from partlog.kafka.errors import Errors
from partlog.kafka.producer_ids import PRODUCER_ID_BLOCK_SIZE, ProducerIdBlock
from partlog.kafka.record_batch import build_record_batch
from partlog.kafka.records import CommitBatchRequest, DeleteRecordsRequest, TopicIdPartition
from partlog.replication.config import ReplicationConfig
from partlog.rpc.client import RpcClient, RpcConnectionError
from partlog.rpc.wire import ReplicaFetchPartition, dec_replica_fetch_response, enc_commit, enc_replica_fetch
from partlog.wal.localdir_store import LocalDirStore
from tests.batches import wal_key
from tests.cluster_helpers import check_exactly_once, consume_all, produce, running_cluster, topic_partitions

WAIT_S = 60.0


def run_async(fn: Callable[..., Coroutine[Any, Any, None]]) -> Callable[..., None]:
    """Run an async test in its own event loop (the suite uses no asyncio plugin)."""

    @functools.wraps(fn)
    def wrapper(*args: object, **kwargs: object) -> None:
        asyncio.run(fn(*args, **kwargs))

    return wrapper


def v2_batch(value: bytes) -> bytes:
    return build_record_batch([(None, value, int(time.time() * 1000))])


async def until(cond: Callable[[], bool], what: str, timeout_s: float = WAIT_S) -> None:
    deadline = time.monotonic() + timeout_s
    while not cond():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.02)


def log_of(b: Broker, tp: TopicIdPartition) -> list[tuple[bytes, str, int, int]]:
    read = b.store.read_log(tp, b.store.partition_state(tp)["log_start_offset"], 1 << 62)
    return [(e.header, e.object_key, e.byte_offset, e.size) for e in read.entries]


def converged(brokers: list[Broker], tp: TopicIdPartition) -> bool:
    leos = {b.store.log_end_offset(tp) for b in brokers}
    hwms = {b.store.high_watermark(tp) for b in brokers}
    return len(leos) == 1 and hwms == leos


def moved(
    meta: StaticMetadata, leaders: dict[int, int], isr: dict[int, tuple[int, ...]] | None = None
) -> StaticMetadata:
    """``meta`` with partition p led by ``leaders[p]`` at the next leader epoch."""
    [t] = meta.topics()
    parts = list(t.partitions)
    for p, leader in leaders.items():
        old = parts[p]
        parts[p] = replace(
            old,
            leader=leader,
            leader_epoch=old.leader_epoch + 1,
            isr=(isr or {}).get(p, old.isr),
            partition_epoch=old.partition_epoch + 1,
        )
    return meta.with_topics([replace(t, partitions=tuple(parts))])


def cut_off(b: Broker, unreachable: set[int]) -> Callable[[], None]:
    """Broker ``b`` can no longer reach ``unreachable`` for replication;
    returns the function that heals it."""
    real = b.replicas._client

    async def client(broker_id: int) -> RpcClient:
        if broker_id in unreachable:
            raise RpcConnectionError(f"test: broker {broker_id} unreachable")
        return await real(broker_id)

    b.replicas._client = client

    def heal() -> None:
        b.replicas._client = real

    return heal


async def produce_one(b: Broker, tp: TopicIdPartition, acks: int, value: bytes = b"x") -> Errors:
    [r] = await b.produce([(tp, v2_batch(value))], acks=acks, timeout_ms=20_000)
    return r.error


def by_id(brokers: list[Broker]) -> dict[int, Broker]:
    return {b.broker_id: b for b in brokers}


@run_async
async def test_followers_converge_and_serve_the_same_log(tmp_path: Path) -> None:
    objects = LocalDirStore(tmp_path / "objects")
    async with running_cluster(tmp_path, objects, partitions=3, replication_factor=3) as (brokers, meta):
        tps = topic_partitions(meta)
        producer = Producer(("127.0.0.1", brokers[0].port), az="az1", linger_ms=2)
        await producer.start()
        try:
            sent = await produce([producer], tps, 300)
        finally:
            await producer.close()
        assert not sent.failed and len(sent.acked) == 300
        for tp in tps:
            await until(lambda tp=tp: converged(brokers, tp), f"replicas of {tp} to converge")  # type: ignore[misc]
            logs = [log_of(b, tp) for b in brokers]
            assert logs[0] and all(lg == logs[0] for lg in logs)
            caches = [b.store.leader_epoch_cache(tp) for b in brokers]
            assert all(c == caches[0] for c in caches)
        # Every replica holds every partition here: the reference index is the same everywhere.
        usages = [b.store.file_usage() for b in brokers]
        assert usages[0] and all(u == usages[0] for u in usages)
        for b in brokers:
            assert b.store.check() == []
            text = generate_latest(b.metrics.registry).decode()
            # Each broker leads one partition and follows the two others.
            assert "partlog_partitions_led 1.0" in text
            assert "partlog_under_replicated_partitions 0.0" in text
            assert "partlog_replication_entries_replicated_total 0.0" not in text
        seen = await consume_all(("127.0.0.1", brokers[1].port), tps, sent)
        check_exactly_once(sent, seen)


@run_async
async def test_isr_shrinks_acks_all_refused_and_follower_catches_up(tmp_path: Path) -> None:
    cfg = ReplicationConfig(replica_lag_time_max_ms=300, min_insync_replicas=2, replica_fetch_backoff_ms=50)
    objects = LocalDirStore(tmp_path / "objects")
    async with running_cluster(tmp_path, objects, partitions=1, replication_factor=3, replication=cfg) as (
        brokers,
        meta,
    ):
        [tp] = topic_partitions(meta)
        b = by_id(brokers)
        leader = b[1]
        assert await produce_one(leader, tp, -1) == Errors.NONE
        heal3 = cut_off(b[3], {1})
        await until(lambda: leader.replicas.isr(tp) == {1, 2}, "broker 3 to leave the ISR")
        assert await produce_one(leader, tp, -1) == Errors.NONE  # ISR {1, 2} >= min.insync.replicas
        heal2 = cut_off(b[2], {1})
        await until(lambda: leader.replicas.isr(tp) == {1}, "broker 2 to leave the ISR")
        assert await produce_one(leader, tp, -1) == Errors.NOT_ENOUGH_REPLICAS
        assert await produce_one(leader, tp, 1) == Errors.NONE  # acks=1 does not need the ISR
        # The static source committed every ISR change the leader asked for.
        assert meta.partition(tp) is not None
        heal2()
        heal3()
        await until(lambda: leader.replicas.isr(tp) == {1, 2, 3}, "followers to rejoin the ISR")
        await until(lambda: converged(brokers, tp), "followers to catch up")
        assert log_of(b[2], tp) == log_of(leader, tp) == log_of(b[3], tp)
        assert await produce_one(leader, tp, -1) == Errors.NONE
        assert leader.replicas.stats.isr_shrinks >= 2 and leader.replicas.stats.isr_expands >= 1


@run_async
async def test_quiet_partitions_keep_their_isr_while_answered_in_the_quiet_lane(tmp_path: Path) -> None:
    """Quiet session partitions are answered in the quiet lane, which
    still moves the followers' fetch times: without that, every quiet
    follower would leave the ISR after replica_lag_time_max_ms."""
    cfg = ReplicationConfig(replica_lag_time_max_ms=300, replica_fetch_backoff_ms=50, replica_fetch_wait_max_ms=100)
    objects = LocalDirStore(tmp_path / "objects")
    async with running_cluster(tmp_path, objects, partitions=6, replication_factor=3, replication=cfg) as (
        brokers,
        meta,
    ):
        tps = topic_partitions(meta)
        b = by_id(brokers)
        for tp in tps:
            leader = next(x for x in brokers if x.replicas.is_leader(tp))
            assert await produce_one(leader, tp, -1) == Errors.NONE
        await until(lambda: all(converged(brokers, tp) for tp in tps), "followers to catch up")
        quiet = sum(x.replicas.stats.replica_partitions_quiet for x in brokers)
        await asyncio.sleep(2.0)  # over six lag times, fetching nothing new
        assert sum(x.replicas.stats.replica_partitions_quiet for x in brokers) > quiet + 6 * len(tps)
        assert all(x.replicas.isr(tp) == {1, 2, 3} for x in brokers for tp in tps if x.replicas.is_leader(tp))
        assert sum(x.replicas.stats.isr_shrinks for x in brokers) == 0
        # A follower that stops fetching still leaves (its session's last fetch ages).
        heal = cut_off(b[3], {1, 2})
        led1 = [tp for tp in tps if b[1].replicas.is_leader(tp)]
        await until(lambda: all(b[1].replicas.isr(tp) == {1, 2} for tp in led1), "broker 3 to leave the ISR")
        heal()


@pytest.mark.slow
@run_async
async def test_leader_change_truncates_the_old_leaders_divergent_suffix(tmp_path: Path) -> None:
    cfg = ReplicationConfig(replica_fetch_backoff_ms=50)
    objects = LocalDirStore(tmp_path / "objects")
    async with running_cluster(
        tmp_path, objects, partitions=1, replication_factor=3, replication=cfg, commit_rpc_timeout_ms=3000
    ) as (brokers, meta):
        [tp] = topic_partitions(meta)
        b = by_id(brokers)
        producer = Producer(("127.0.0.1", b[3].port), az="az3", linger_ms=2)
        await producer.start()
        try:
            sent = await produce([producer], [tp], 40)
            assert not sent.failed
            await until(lambda: converged(brokers, tp), "replicas to converge")
            committed = b[1].store.log_end_offset(tp)

            # Brokers 2 and 3 learn that 2 leads at epoch 1; broker 1 does not
            # (a network partition between it and the controller).
            new = moved(meta, {0: 2}, isr={0: (2, 3)})
            b[2].set_metadata(new)
            b[3].set_metadata(new)
            await until(lambda: b[2].replicas.leader_epoch(tp) == 1, "broker 2 to lead")
            # The stale leader still takes acks=1 writes; acks=all ones never complete.
            assert await produce_one(b[1], tp, 1, b"lost") == Errors.NONE
            assert await produce_one(b[1], tp, -1, b"never") in (
                Errors.REQUEST_TIMED_OUT,
                Errors.NOT_LEADER_OR_FOLLOWER,
            )
            stale_keys = {key for header, key, _, _ in log_of(b[1], tp) if int.from_bytes(header[:8]) >= committed}
            assert stale_keys and b[1].store.log_end_offset(tp) > committed

            # Fencing: epoch 0 at the new leader, epoch 1 at the stale one.
            async def fetch_as(target: Broker, epoch: int) -> Errors:
                c = await RpcClient.connect("127.0.0.1", target.port)
                try:
                    part = ReplicaFetchPartition(tp, epoch, 0, -1, -1)
                    body = await c.call("replica_fetch", enc_replica_fetch(3, 0, 10, [part]))
                    return dec_replica_fetch_response(body, 1)[0].error
                finally:
                    await c.close()

            assert await fetch_as(b[2], 0) == Errors.FENCED_LEADER_EPOCH
            assert await fetch_as(b[1], 1) == Errors.UNKNOWN_LEADER_EPOCH
            # A follower refuses commits.
            c = await RpcClient.connect("127.0.0.1", b[3].port)
            try:
                key = wal_key(int(time.time() * 1000))
                batch = v2_batch(b"c")
                req = CommitBatchRequest.from_header(0, tp, 0, batch[:61])
                answer = await c.call("commit", enc_commit(key, 1, len(batch), [req]))
                assert answer[0][0] == Errors.NOT_LEADER_OR_FOLLOWER
            finally:
                await c.close()

            # The new leader takes more writes (the same idempotent producer
            # continues its sequences there).
            more = await produce([producer], [tp], 20, sent=sent, first_seq=40)
            assert not more.failed

            # Broker 1 learns the truth: it becomes a follower and truncates.
            b[1].set_metadata(new)
            await until(lambda: converged(brokers, tp), "broker 1 to truncate and catch up")
            assert log_of(b[1], tp) == log_of(b[2], tp)
            assert b[1].replicas.stats.truncations >= 1
            assert b[1].store.referenced_files(stale_keys) == set()
            assert b[1].store.check() == []
        finally:
            await producer.close()
        seen = await consume_all(("127.0.0.1", b[2].port), [tp], more)
        check_exactly_once(more, seen)  # also: nothing read that the producer did not send


@pytest.mark.parametrize("acks", [1, -1])
@run_async
async def test_commit_pipelining_keeps_wal_file_order(tmp_path: Path, acks: int) -> None:
    """Many WAL files in flight to one leader: offsets follow file order."""
    objects = LocalDirStore(tmp_path / "objects")
    async with running_cluster(tmp_path, objects, partitions=1, replication_factor=3, commit_interval_ms=1) as (
        brokers,
        meta,
    ):
        [tp] = topic_partitions(meta)
        rep = by_id(brokers)[2]  # not the leader: its commits go over the network
        answers = await asyncio.gather(*(rep.produce([(tp, v2_batch(str(i).encode()))], acks=acks) for i in range(30)))
        offsets = [a[0].base_offset for a in answers]
        assert all(a[0].error == Errors.NONE for a in answers)
        assert sorted(offsets) == list(range(30))


@run_async
async def test_a_follower_far_behind_catches_up_in_bounded_fetches(tmp_path: Path) -> None:
    cfg = ReplicationConfig(replica_fetch_entries_max=2, replica_fetch_backoff_ms=50)
    objects = LocalDirStore(tmp_path / "objects")
    async with running_cluster(tmp_path, objects, partitions=1, replication_factor=3, replication=cfg) as (
        brokers,
        meta,
    ):
        [tp] = topic_partitions(meta)
        b = by_id(brokers)
        heal = cut_off(b[3], {1})
        for i in range(12):
            assert await produce_one(b[1], tp, 1, str(i).encode()) == Errors.NONE
        await until(lambda: b[2].store.log_end_offset(tp) == b[1].store.log_end_offset(tp), "broker 2 to catch up")
        assert b[3].store.log_end_offset(tp) == 0
        fetches = b[3].replicas.stats.replica_fetches_sent
        heal()
        await until(lambda: converged(brokers, tp), "broker 3 to catch up")
        # 12 entries, at most 2 a fetch.
        assert b[3].replicas.stats.replica_fetches_sent - fetches >= 6
        assert log_of(b[3], tp) == log_of(b[1], tp)


@run_async
async def test_min_insync_above_the_replication_factor_is_capped_by_it(tmp_path: Path) -> None:
    """Regression: the broker used to refuse the leadership itself.  As
    Kafka's effectiveMinIsr: min(min.insync.replicas, replication factor)."""
    cfg = ReplicationConfig(min_insync_replicas=2)
    async with running_cluster(tmp_path, LocalDirStore(tmp_path / "objects"), partitions=1, replication=cfg) as (
        brokers,
        meta,
    ):
        [tp] = topic_partitions(meta)
        leader = by_id(brokers)[1]
        assert leader.replicas.is_leader(tp)
        assert await produce_one(leader, tp, -1) == Errors.NONE
        assert await produce_one(leader, tp, 1) == Errors.NONE


class _FlakyIds(StaticMetadata):
    """A source whose controller is unreachable for the first request."""

    def __init__(self, meta: StaticMetadata, manager: ProducerIdManager) -> None:
        super().__init__(meta.brokers(), meta.topics(), cluster_id=meta.cluster_id)
        self.manager = manager
        self.calls = 0

    async def allocate_producer_ids(self, broker_id: int) -> ProducerIdBlock | Errors | None:
        self.calls += 1
        if self.calls == 1:
            return Errors.COORDINATOR_NOT_AVAILABLE
        return self.manager.allocate(broker_id)


@run_async
async def test_an_unreachable_controller_does_not_switch_to_random_producer_ids(tmp_path: Path) -> None:
    """Regression: one failed block request used to switch to random ids for good."""
    meta = StaticMetadata.generate(azs=1, brokers_per_az=1, topics={"t": 1})
    with ProducerIdManager(tmp_path / "pids") as manager:
        source = _FlakyIds(meta, manager)
        broker = Broker(BrokerConfig(1, "az1", str(tmp_path / "b1"), sync=False), source, LocalDirStore(tmp_path / "o"))
        await broker.start()
        try:
            pid = await broker.init_producer_id()
            assert pid is not None and pid < PRODUCER_ID_BLOCK_SIZE and source.calls == 2
        finally:
            await broker.stop()


@run_async
async def test_a_follower_joins_the_isr_only_once_its_log_start_caught_up(tmp_path: Path) -> None:
    """Regression (DST, retention with min.insync.replicas=2): a follower
    out of the ISR still held entries below the leader's log start (what
    DeleteRecords or retention removed there) when it rejoined; walmgr,
    having asked the leader and the ISR of the moment, had deleted their
    object.  Now the fetch carries the follower's log start (Kafka's
    FetchRequest LogStartOffset) and the leader adds it to the ISR only when
    it is at or past its own."""
    cfg = ReplicationConfig(replica_lag_time_max_ms=300, replica_fetch_backoff_ms=50)
    objects = LocalDirStore(tmp_path / "objects")
    async with running_cluster(tmp_path, objects, azs=2, partitions=1, replication_factor=2, replication=cfg) as (
        brokers,
        meta,
    ):
        [tp] = topic_partitions(meta)
        b = by_id(brokers)
        leader = b[meta.partition(tp).leader]  # type: ignore[union-attr]
        follower = b[next(x for x in b if x != leader.broker_id)]
        fid = follower.broker_id
        assert await produce_one(leader, tp, -1) == Errors.NONE
        cut_off(follower, {leader.broker_id})  # it stops fetching: we fetch in its name
        await until(lambda: leader.replicas.isr(tp) == {leader.broker_id}, "the follower to leave the ISR")
        for _ in range(3):
            assert await produce_one(leader, tp, 1) == Errors.NONE
        hwm = leader.store.high_watermark(tp)
        [deleted] = leader.store.delete_records([DeleteRecordsRequest(tp, hwm - 1)])
        assert deleted.errors == Errors.NONE
        leader_start = leader.store.log_start_offset(tp)
        assert leader_start == hwm - 1 > follower.store.log_start_offset(tp) == 0
        epoch = leader.replicas.leader_epoch(tp)
        assert epoch is not None
        leo = leader.store.log_end_offset(tp)

        async def fetch_as_follower(log_start: int) -> None:
            c = await RpcClient.connect("127.0.0.1", leader.port)
            try:
                part = ReplicaFetchPartition(tp, epoch, leo, epoch, -1, log_start)
                body = await c.call("replica_fetch", enc_replica_fetch(fid, 0, 10, [part]))
                [r] = dec_replica_fetch_response(body, 1)
                assert r.error == Errors.NONE and r.log_start_offset == leader_start
            finally:
                await c.close()

        # At the leader's end and HWM, but its log start is behind: not yet.
        for _ in range(5):
            await fetch_as_follower(0)
            await asyncio.sleep(0.1)
            assert leader.replicas.isr(tp) == {leader.broker_id}
        # Its log start caught up (it applied the leader's): it joins.
        await fetch_as_follower(leader_start)
        await until(lambda: leader.replicas.isr(tp) == {leader.broker_id, fid}, "the follower to rejoin")


@run_async
async def test_a_follower_whose_log_start_passed_the_leaders_keeps_replicating(tmp_path: Path) -> None:
    """Regression (a CI failure of test_walmgr_safety): retention ran on each
    replica in turn, and a follower that had meanwhile learned a higher HWM
    cut further than the leader had (log start 91 against 81).  As in Kafka,
    a follower only raises its log start: it stays ahead, keeps replicating
    and stays in the ISR, and the leader still references the objects of the
    entries it keeps."""
    cfg = ReplicationConfig(replica_lag_time_max_ms=500, replica_fetch_backoff_ms=50)
    objects = LocalDirStore(tmp_path / "objects")
    async with running_cluster(tmp_path, objects, partitions=1, replication_factor=3, replication=cfg) as (
        brokers,
        meta,
    ):
        [tp] = topic_partitions(meta)
        [topic] = meta.topics()
        b = by_id(brokers)
        leader = b[meta.partition(tp).leader]  # type: ignore[union-attr]
        follower = next(x for x in brokers if x is not leader)
        later = 2**45  # every record is older than retention.ms at this instant

        def retention_on(x: Broker) -> None:
            x.store.alter_topic_configs(topic.topic_id, {"retention.ms": 300})
            x.store.enforce_retention(later)
            x.store.alter_topic_configs(topic.topic_id, {"retention.ms": -1})

        for _ in range(3):
            assert await produce_one(leader, tp, -1) == Errors.NONE
        await until(lambda: converged(brokers, tp), "the replicas to converge")
        retention_on(leader)
        lead_start = leader.store.log_start_offset(tp)
        assert lead_start == 3
        kept = set(leader.store.file_usage())
        for _ in range(3):
            assert await produce_one(leader, tp, -1) == Errors.NONE
        await until(lambda: converged(brokers, tp), "the replicas to converge")
        kept = set(leader.store.file_usage()) - kept  # the objects of offsets 3..5
        retention_on(follower)
        assert follower.store.log_start_offset(tp) == 6 > lead_start
        # Replication goes on: acks=all is answered, the follower stays in the ISR.
        for _ in range(5):
            assert await produce_one(leader, tp, -1) == Errors.NONE
        await until(lambda: converged(brokers, tp), "the replicas to converge")
        assert leader.replicas.isr(tp) == {x.broker_id for x in brokers}
        assert follower.store.log_start_offset(tp) == 6
        assert leader.store.log_start_offset(tp) == lead_start
        assert kept and kept <= set(leader.store.file_usage())
        assert kept.isdisjoint(follower.store.file_usage())
        for x in brokers:
            assert x.store.check() == []


async def _hwm_passes_what_the_follower_has_not_made_durable(tmp_path: Path) -> bool:
    """acks=all with min ISR 2 while the follower's journal append (its
    fdatasync) is stalled: whether the leader's HWM passed the follower's
    durable log end meanwhile.  Then the stall ends and the produce completes."""
    cfg = ReplicationConfig(min_insync_replicas=2, replica_fetch_backoff_ms=50)
    objects = LocalDirStore(tmp_path / "objects")
    async with running_cluster(tmp_path, objects, partitions=1, replication_factor=2, replication=cfg) as (
        brokers,
        meta,
    ):
        [tp] = topic_partitions(meta)
        info = meta.partition(tp)
        assert info is not None
        b = by_id(brokers)
        leader, follower = b[info.leader], b[next(r for r in info.replicas if r != info.leader)]
        assert await produce_one(leader, tp, -1) == Errors.NONE
        await until(lambda: converged([leader, follower], tp), "the follower to catch up")
        durable = follower.store.log_end_offset(tp)
        journal = follower.store._journal
        real = journal.append
        stall, stalled = threading.Event(), threading.Event()

        def append(payload: bytes) -> int:
            stalled.set()
            stall.wait()
            return real(payload)

        journal.append = append  # type: ignore[method-assign]
        try:
            produced = asyncio.ensure_future(produce_one(leader, tp, -1, b"y"))
            await until(stalled.is_set, "the follower's append to reach its journal")
            # Time for the follower's fetcher to send its next fetches.
            await asyncio.sleep(0.5)
            passed = leader.store.high_watermark(tp) > durable or produced.done()
        finally:
            stall.set()
            del journal.append
        assert await produced == Errors.NONE
        await until(lambda: converged([leader, follower], tp), "the follower to catch up again")
        return passed


@run_async
async def test_the_leader_counts_only_what_a_follower_made_durable(tmp_path: Path) -> None:
    """The follower reports a log end only once its append returned, that is
    once the journal's fdatasync made it durable."""
    assert not await _hwm_passes_what_the_follower_has_not_made_durable(tmp_path)


@run_async
async def test_the_injected_follower_ack_before_journal_sync_is_found(tmp_path: Path) -> None:
    """The check above finds the injected bug that reports received entries
    as the follower's log end before their append is durable."""
    injected_bugs.enable(["follower_ack_before_journal_sync"])
    try:
        assert await _hwm_passes_what_the_follower_has_not_made_durable(tmp_path)
    finally:
        injected_bugs.enable([])
