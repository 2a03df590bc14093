"""The acting controller's batched writes on etcd (issue 32) against a real
3-member etcd on loopback: a fencing moves many partitions in few
transactions, and an etcd leader killed while the batches are in flight
ends with exactly one leader per partition per leader epoch, as etcd's
whole history of the partition keys shows (the chunking's own properties
are in tests/unit/test_etcd_batch.py)."""

from __future__ import annotations

import asyncio
import contextlib
import copy
from collections import defaultdict
from collections.abc import Iterator

import msgpack
import pytest

from partlog.controller.cluster_meta import NO_LEADER, BrokerInfo, PartitionInfo, TopicInfo
from partlog.controller.etcd_batch import TXN_OPS_MAX, Chunk
from partlog.controller.etcd_controller import plan
from partlog.controller.etcd_layout import dec_part
from partlog.controller.etcd_meta import EtcdMetadata
from partlog.kafka.records import TopicIdPartition
from partlog.tools.etcd_launcher import EtcdCluster
from tests.system.test_etcd_metadata import WAIT_S, Brokers, needs_etcd, with_brokers
from tests.tmpdirs import module_dir

# Enough partitions that a fencing needs many chunks, few enough for CI.
PARTITIONS = 600
# A lost etcd leader stalls writes for an election (about a second): the
# sessions outlive it, so nobody but the victim is fenced.
SESSION_LONG_MS = 8_000
HISTORY_IDLE_S = 1.0


def _controller(b: Brokers) -> EtcdMetadata:
    return next(m for m in b.sources.values() if m.is_controller)


def _settled(admin: EtcdMetadata, victim: int) -> bool:
    t = admin.topic("t")
    return (
        t is not None
        and all(p.leader not in (victim, NO_LEADER) and victim not in p.isr for p in t.partitions)
        and plan(admin.view, unclean=False, elect_preferred=False).empty()
    )


@pytest.fixture(scope="module")
def etcd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EtcdCluster]:
    with module_dir(tmp_path_factory, "etcd") as d, EtcdCluster(str(d)) as cluster:
        yield cluster


@needs_etcd
def test_a_fencing_moves_many_partitions_in_few_transactions(etcd: EtcdCluster) -> None:
    async def body(b: Brokers) -> None:
        # The victim's session is revoked, not expired: the others' must not
        # lapse under load (a CI rehearsal's did at 2 s, and the ISR shrank twice).
        await b.start(3, session_timeout_ms=10_000)
        assert not isinstance((await b.admin.create_topics({"t": (PARTITIONS, 3)}))["t"], Exception)
        admin = b.admin
        assert await admin.wait_for(lambda: admin.topic("t") is not None, WAIT_S)
        ctl = _controller(b)
        victim = next(bid for bid, m in b.sources.items() if m is not ctl)
        before = admin.topic("t")
        assert before is not None
        led = [i for i, p in enumerate(before.partitions) if p.leader == victim]
        txns, writes = ctl.controller_txns, ctl.controller_writes
        await b.sources.pop(victim).stop(revoke=True)
        assert await admin.wait_for(lambda: _settled(admin, victim), WAIT_S)
        # The controller counts a chunk when etcd's answer comes back: the
        # watch may bring the chunk's events first.
        async with asyncio.timeout(WAIT_S):
            while ctl.controller_writes - writes < PARTITIONS:
                await asyncio.sleep(0.01)
        after = admin.topic("t")
        assert after is not None
        for old, new in zip(before.partitions, after.partitions, strict=True):
            # Every partition left the victim's ISR; the ones it led elected
            # another ISR member, one leader epoch on.
            assert new.partition_epoch == old.partition_epoch + 1
            if old.leader == victim:
                assert new.leader_epoch == old.leader_epoch + 1 and new.leader in old.isr
            else:
                assert (new.leader, new.leader_epoch) == (old.leader, old.leader_epoch)
        changed = ctl.controller_writes - writes
        sent = ctl.controller_txns - txns
        assert changed == PARTITIONS and len(led) == PARTITIONS // 3
        # Each partition costs a compare and a put: ~TXN_OPS_MAX / 2 per
        # transaction, against one transaction each before batching.
        assert sent <= 2 * -(-PARTITIONS * 2 // (TXN_OPS_MAX - 4)), (sent, changed)

    with_brokers(etcd, body)


@needs_etcd
def test_etcd_leader_killed_during_a_batched_election(tmp_path: object) -> None:
    asyncio.run(_etcd_leader_killed_during_a_batched_election(str(tmp_path)))


async def _etcd_leader_killed_during_a_batched_election(tmp: str) -> None:
    with EtcdCluster(tmp) as cluster:
        b = Brokers(cluster.url("/kill-leader"))
        try:
            for bid in (1, 2, 3):
                m = EtcdMetadata(
                    b.url, BrokerInfo(bid, f"az{bid}", "127.0.0.1", 9000 + bid), create_cluster=True,
                    session_timeout_ms=SESSION_LONG_MS,
                )  # fmt: skip
                await m.start(timeout_ms=10_000)
                b.sources[bid] = m
            await b.admin.start(timeout_ms=10_000)
            admin = b.admin
            assert await admin.wait_for(lambda: all(admin.view.accepted(x) for x in (1, 2, 3)), WAIT_S)
            await admin.create_topics({"t": (PARTITIONS, 3)})
            assert await admin.wait_for(lambda: admin.topic("t") is not None, WAIT_S)
            ctl = _controller(b)
            victim = next(bid for bid, m in b.sources.items() if m is not ctl)
            leader = await asyncio.to_thread(cluster.leader)
            assert leader is not None
            # The first chunk of the election goes at once; the others wait
            # until etcd's leader is killed, then go to a cluster electing one.
            acting = ctl.acting
            assert acting is not None
            write_chunk, gate = acting._write_chunk, asyncio.Event()
            sent: list[int] = []

            async def gated(chunk: Chunk) -> bool:
                sent.append(len(chunk.changes))
                if len(sent) > 1:
                    await gate.wait()
                return await write_chunk(chunk)

            acting._write_chunk = gated  # type: ignore[method-assign]
            writes = ctl.controller_writes
            await b.sources.pop(victim).stop(revoke=True)
            assert await ctl.wait_for(lambda: ctl.controller_writes > writes, WAIT_S)
            landed = ctl.controller_writes - writes
            await asyncio.to_thread(cluster.kill, leader)
            gate.set()
            assert await admin.wait_for(lambda: _settled(admin, victim), 3 * WAIT_S)
            assert 0 < landed < PARTITIONS and len(sent) > 1, (landed, sent)  # killed mid-batch
            # Nobody writes from here on (the sessions end without a
            # controller to fence them): etcd's last states are final.
            for m in b.sources.values():
                await m.stop()
            b.sources.clear()
            t = admin.topic("t")
            assert t is not None
            final = await _final(admin, t)
            history = await _history(admin)
        finally:
            await b.stop()
    replicas = {i: p.replicas for i, p in enumerate(t.partitions)}
    leaders: dict[tuple[int, int], set[int]] = defaultdict(set)
    for i, states in history.items():
        created = PartitionInfo(replicas[i][0], 0, replicas[i], replicas[i], 0)
        prev = created
        for p in states:
            # Every committed state moved on from the one before it: no
            # write ever landed on a state it was not decided on.
            assert p.partition_epoch == prev.partition_epoch + 1, (i, prev, p)
            assert p.leader_epoch >= prev.leader_epoch
            if p.leader_epoch == prev.leader_epoch:
                assert p.leader == prev.leader, (i, prev, p)
            prev = p
        for p in (created, *states):
            leaders[(i, p.leader_epoch)].add(p.leader)
    two = {k: v for k, v in leaders.items() if len(v - {NO_LEADER}) > 1}
    assert not two, f"two leaders in one epoch: {sorted(two.items())[:5]}"
    for i, p in enumerate(final):
        # One leader, not the victim.  (Another broker may have been fenced
        # too if its keep-alives failed through etcd's election; the rules
        # above hold all the same.)
        assert p.leader not in (victim, NO_LEADER) and victim not in p.isr and history[i][-1] == p


async def _final(admin: EtcdMetadata, t: TopicInfo) -> list[PartitionInfo]:
    c = await admin.conn.client()
    prefix = admin.keys.parts_of(t.topic_id)
    got = {int(kv.key[len(prefix) :]): kv.value for kv in await c.get_prefix(prefix)}
    assert len(got) == len(t.partitions)  # every partition was written
    return [dec_part(f"partition {i}", got[i]) for i in range(len(t.partitions))]


async def _history(admin: EtcdMetadata) -> dict[int, list[PartitionInfo]]:
    """Every state etcd committed for the topic's partition keys, in order
    (a watch from revision 1: the cluster is new, nothing is compacted)."""
    t = admin.topic("t")
    assert t is not None
    prefix = admin.keys.parts_of(t.topic_id)
    c = await admin.conn.client()
    out: dict[int, list[PartitionInfo]] = defaultdict(list)
    watch = await c.watch_prefix(prefix, start_revision=1)
    events = aiter(watch)
    try:
        while True:
            try:
                async with asyncio.timeout(HISTORY_IDLE_S):
                    ev = await anext(events)
            except TimeoutError:
                break
            i = int(ev.kv.key[len(prefix) :])
            out[i].append(dec_part(f"partition {i}", ev.kv.value))
    finally:
        with contextlib.suppress(Exception):
            await watch.cancel()
    return out


# ------------------------------------------------- partlog bench metadata


def test_bench_metadata_options_and_topics() -> None:
    from partlog.tools import bench_metadata as bm

    for bad in ((), (2,), (bm.PARTITIONS_MAX + 1,), (300,) * (bm.SIZES_MAX + 1)):
        with pytest.raises(ValueError, match="--partitions"):
            bm.MetadataBenchOptions(partitions=bad)
    assert bm.topics(300) == {"bench": 300}
    assert bm.topics(30_000) == {"bench": 10_000, "bench-1": 10_000, "bench-2": 10_000}
    assert sum(bm.topics(25_001).values()) == 25_001 and max(bm.topics(25_001).values()) <= 10_000


@needs_etcd
def test_bench_metadata_at_a_small_size(capsys: pytest.CaptureFixture[str]) -> None:
    """CI's size of `partlog bench metadata`: both back ends, one kill, and
    the report with its verdicts (never asserted: timings)."""
    from partlog.tools import bench_metadata as bm

    r = bm.run(bm.MetadataBenchOptions(partitions=(30,), blocks=10, concurrency=2, rounds=3, fencing_rounds=1))
    (run,) = r["runs"]
    k = run["etcd"]
    assert run["partitions"] == 30 and k["failover_ms"]["led"] == 10 and k["elections"]["count"] == 10
    assert 1 <= k["elections"]["transactions"] <= 2  # 30 partitions fit one transaction
    assert set(run["verdicts"]) == {"elections_ratio", "failover_p50", "failover_at_target_scale"}
    assert not run["verdicts"]["failover_at_target_scale"]
    bm.print_report(r)
    out = capsys.readouterr().out
    assert "30 partitions; the crashed broker led 10" in out and "verdicts (issue 32)" in out


@needs_etcd
def test_a_chunk_that_lost_a_compare_writes_only_what_did_not_move(etcd: EtcdCluster) -> None:
    """A stale plan of several partitions, one of which a leader changed
    meanwhile: the chunk fails, and its retry writes the others only."""

    async def body(b: Brokers) -> None:
        await b.start(3)
        await b.admin.create_topics({"t": (6, 3)})
        ctl = _controller(b)
        assert await ctl.wait_for(lambda: ctl.topic("t") is not None, WAIT_S)
        t = ctl.topic("t")
        assert t is not None
        # A plan made on a view where the last replica of partition 0 is no
        # longer accepted: every partition it is in leaves its ISR.
        gone = t.partitions[0].replicas[-1]
        planned_on = copy.deepcopy(ctl.view)
        planned_on.incarnations[gone] = -1
        stale = plan(planned_on, unclean=False, elect_preferred=False, leaderless_first=False)
        assert len(stale.changes) == 6
        # Meanwhile partition 0's leader commits its own ISR change.
        tp, p = TopicIdPartition(t.topic_id, 0), t.partitions[0]
        leader = b.sources[p.leader]
        assert await leader.wait_for(lambda: leader.partition(tp) == p, WAIT_S)
        shrink = tuple(r for r in p.isr if r != p.replicas[1])
        committed = await leader.alter_partition(p.leader, tp, p.leader_epoch, p.partition_epoch, shrink)
        assert isinstance(committed, PartitionInfo)
        assert await ctl.wait_for(lambda: ctl.view.part_revision(tp) > 0, WAIT_S)
        assert ctl.session is not None and ctl.acting is not None
        conflicts, txns, writes = ctl.controller_conflicts, ctl.controller_txns, ctl.controller_writes
        cand = ctl.keys.candidate(ctl.session.lease_id)
        await ctl.acting.write_plan(stale, cand, ctl.view.candidates[cand])
        assert ctl.controller_conflicts == conflicts + 1  # partition 0, dropped
        # The elections' chunk, then the ISR changes' chunk and its retry.
        assert ctl.controller_txns == txns + 3
        assert ctl.controller_writes == writes + 5
        c = await ctl.conn.client()
        assert msgpack.unpackb((await c.get(ctl.keys.part(tp))).value)[3] == list(committed.isr)
        for ch in stale.changes[1:]:
            assert msgpack.unpackb((await c.get(ctl.keys.part(ch.tp))).value)[3] == list(ch.new.isr)

    with_brokers(etcd, body)
