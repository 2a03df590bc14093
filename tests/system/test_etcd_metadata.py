"""Cluster metadata on etcd (issue 19): the back end against a real 3-member
etcd on loopback: sessions and fencing, incarnations, AlterPartition and
producer-id CAS, elections, prefixes of other clusters, member kills (the
URL and the view's refusal of hostile values are in tests/unit/test_etcd_view.py)."""

from __future__ import annotations

import asyncio
import copy
import shutil
import uuid
from collections.abc import Awaitable, Callable, Iterator

import msgpack
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from partlog.controller.cluster_meta import BrokerInfo, ClusterMismatchError, PartitionInfo
from partlog.controller.etcd_controller import plan
from partlog.controller.etcd_meta import EtcdMetadata
from partlog.kafka.errors import Errors
from partlog.kafka.records import TopicIdPartition
from partlog.tools.etcd_launcher import EtcdCluster
from tests.tmpdirs import module_dir

needs_etcd = pytest.mark.skipif(
    shutil.which("etcd") is None, reason="etcd is not installed (scripts/test installs Debian's etcd-server)"
)

SESSION_MS = 2_000  # etcd's shortest lease: fencing tests stay quick
WAIT_S = 20.0


# ------------------------------------------------------------- real etcd


@pytest.fixture(scope="module")
def etcd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EtcdCluster]:
    with module_dir(tmp_path_factory, "etcd") as d, EtcdCluster(str(d)) as cluster:
        yield cluster


def _url(etcd: EtcdCluster) -> str:
    return etcd.url(f"/t{uuid.uuid4().hex[:12]}")


class Brokers:
    """Broker sessions (no broker behind them) and an admin view of one prefix."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.sources: dict[int, EtcdMetadata] = {}
        self.admin = EtcdMetadata(url)

    async def add(self, bid: int, **kw: object) -> EtcdMetadata:
        kw.setdefault("session_timeout_ms", SESSION_MS)
        m = EtcdMetadata(
            self.url, BrokerInfo(bid, f"az{bid % 3}", "127.0.0.1", 9000 + bid), create_cluster=True,
            **kw,  # type: ignore[arg-type]
        )  # fmt: skip
        await m.start(timeout_ms=10_000)
        self.sources[bid] = m
        return m

    async def start(self, n: int, **kw: object) -> None:
        for bid in range(1, n + 1):
            await self.add(bid, **kw)
        await self.admin.start(timeout_ms=10_000)
        assert await self.admin.wait_for(lambda: all(self.admin.view.accepted(b) for b in self.sources), WAIT_S)

    def controllers(self) -> list[int]:
        return [b for b, m in self.sources.items() if m.is_controller]

    async def stop(self) -> None:
        for m in self.sources.values():
            await m.stop(revoke=True)
        await self.admin.stop()


def with_brokers(etcd: EtcdCluster, body: Callable[[Brokers], Awaitable[None]]) -> None:
    """Run ``body`` on a fresh prefix in its own event loop (the suite uses
    no asyncio plugin), stopping every session after."""

    async def main() -> None:
        b = Brokers(_url(etcd))
        try:
            await body(b)
        finally:
            await b.stop()

    asyncio.run(main())


@needs_etcd
def test_lease_expiry_fences_and_elects(etcd: EtcdCluster) -> None:
    with_brokers(etcd, _lease_expiry_fences_and_elects)


async def _lease_expiry_fences_and_elects(brokers: Brokers) -> None:
    await brokers.start(3)
    info = (await brokers.admin.create_topics({"t": (6, 3)}))["t"]
    assert not isinstance(info, Errors)
    victim = next(b for b in brokers.sources if not brokers.sources[b].is_controller)
    before = brokers.admin.topic("t")
    assert before is not None
    await brokers.sources.pop(victim).stop()  # a crash: the lease runs out
    admin = brokers.admin

    def fenced() -> bool:
        t = admin.topic("t")
        return t is not None and all(p.leader != victim and victim not in p.isr for p in t.partitions)

    assert await admin.wait_for(fenced, WAIT_S)
    after = admin.topic("t")
    assert after is not None
    for old, new in zip(before.partitions, after.partitions, strict=True):
        if old.leader == victim:
            assert new.leader_epoch == old.leader_epoch + 1 and new.leader in old.isr
        assert new.partition_epoch == old.partition_epoch + 1
    assert admin.broker(victim) is None
    assert plan(admin.view, unclean=False, elect_preferred=False).empty()


@needs_etcd
def test_new_incarnation_is_fenced_before_it_is_accepted(etcd: EtcdCluster) -> None:
    with_brokers(etcd, _new_incarnation_is_fenced_before_it_is_accepted)


async def _new_incarnation_is_fenced_before_it_is_accepted(brokers: Brokers) -> None:
    """A broker back faster than its session: the new incarnation waits
    for the old session to end, the old incarnation leaves every ISR and
    leadership, and only then is the new one accepted (and started)."""
    await brokers.start(3)
    await brokers.admin.create_topics({"t": (6, 3)})
    admin = brokers.admin
    victim = next(b for b in brokers.sources if not brokers.sources[b].is_controller)
    led = [i for i, p in enumerate(admin.topic("t").partitions) if p.leader == victim]  # type: ignore[union-attr]
    old_epochs = [p.leader_epoch for p in admin.topic("t").partitions]  # type: ignore[union-attr]
    old = brokers.sources.pop(victim)
    await old.stop()  # its lease is still alive
    fresh = await brokers.add(victim)
    assert fresh.broker_epoch > old.broker_epoch
    assert await admin.wait_for(lambda: admin.view.incarnations.get(victim) == fresh.broker_epoch, WAIT_S)
    now = admin.topic("t")
    assert now is not None and led
    for i in led:
        assert now.partitions[i].leader_epoch > old_epochs[i], "the old incarnation kept a leadership"


@needs_etcd
def test_alter_partition_compare_and_swap(etcd: EtcdCluster) -> None:
    with_brokers(etcd, _alter_partition_compare_and_swap)


async def _alter_partition_compare_and_swap(brokers: Brokers) -> None:
    await brokers.start(3)
    await brokers.admin.create_topics({"t": (1, 3)})
    admin = brokers.admin
    t = admin.topic("t")
    assert t is not None
    p = t.partitions[0]
    tp = TopicIdPartition(t.topic_id, 0)
    leader = brokers.sources[p.leader]
    await leader.wait_for(lambda: leader.partition(tp) is not None, WAIT_S)
    shrink = tuple(r for r in p.isr if r == p.leader)
    other = tuple(r for r in p.isr if r != p.replicas[-1])
    # Two writers with the same partition epoch: exactly one commits.
    a, b = await asyncio.gather(
        leader.alter_partition(p.leader, tp, p.leader_epoch, p.partition_epoch, shrink),
        leader.alter_partition(p.leader, tp, p.leader_epoch, p.partition_epoch, other),
    )
    assert sum(isinstance(x, PartitionInfo) for x in (a, b)) == 1, (a, b)
    loser = a if isinstance(b, PartitionInfo) else b
    assert loser == Errors.INVALID_UPDATE_VERSION
    # A stale epoch, a non-leader, an unknown partition: Kafka's answers.
    assert await leader.alter_partition(p.leader, tp, p.leader_epoch, p.partition_epoch, p.isr) in (
        Errors.INVALID_UPDATE_VERSION,
    )
    follower = next(m for bid, m in brokers.sources.items() if bid != p.leader)
    assert (
        await follower.alter_partition(follower.broker_info.broker_id, tp, 0, 0, p.isr)  # type: ignore[union-attr]
        == Errors.NOT_LEADER_OR_FOLLOWER
    )
    gone = TopicIdPartition(uuid.uuid4(), 0)
    assert await leader.alter_partition(p.leader, gone, 0, 0, p.isr) == Errors.UNKNOWN_TOPIC_OR_PARTITION


@needs_etcd
@settings(max_examples=4, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.integers(2, 4), st.integers(1, 6))
def test_producer_id_blocks_race(etcd: EtcdCluster, racers: int, rounds: int) -> None:
    """Brokers racing for producer-id blocks: every block is handed out
    once, and together they tile the ids from 0 without a gap."""

    async def race() -> list[tuple[int, int]]:
        b = Brokers(_url(etcd))
        try:
            for bid in range(1, racers + 1):
                await b.add(bid)
            got = await asyncio.gather(
                *(m.allocate_producer_ids(bid) for _ in range(rounds) for bid, m in b.sources.items())
            )
        finally:
            await b.stop()
        blocks = []
        for x in got:
            assert not isinstance(x, Errors), x
            blocks.append((x.first_producer_id, x.size))
        return blocks

    blocks = sorted(asyncio.run(race()))
    assert [first for first, _ in blocks] == [i * 1000 for i in range(racers * rounds)]


@pytest.mark.slow
@needs_etcd
@settings(max_examples=3, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.integers(2, 4))
def test_election_race(etcd: EtcdCluster, racers: int) -> None:
    """Candidates starting at once: exactly one acts as controller; when it
    dies, exactly one other takes over; a deposed controller's guarded
    write fails."""

    async def race() -> None:
        b = Brokers(_url(etcd))
        try:
            await asyncio.gather(*(b.add(bid) for bid in range(1, racers + 1)))
            await b.admin.start(timeout_ms=10_000)
            assert await b.admin.wait_for(lambda: len(b.controllers()) == 1, WAIT_S)
            await asyncio.sleep(0.3)
            assert len(b.controllers()) == 1
            first = b.controllers()[0]
            old = b.sources.pop(first)
            assert old.session is not None
            candidate = old.keys.candidate(old.session.lease_id)
            rev = old.view.candidates[candidate]
            await old.stop(revoke=True)
            assert await b.admin.wait_for(lambda: len(b.controllers()) == 1, WAIT_S)
            # The deposed controller's guard no longer holds.
            probe = b.admin
            c = await probe.conn.client()
            t = c.transactions
            ok, _ = await probe.conn.txn([t.create(candidate) == rev], [t.put(probe.keys.root + b"probe", b"x")])
            assert not ok
        finally:
            await b.stop()

    asyncio.run(race())


@needs_etcd
def test_prefix_without_a_cluster_or_of_another(etcd: EtcdCluster) -> None:
    asyncio.run(_prefix_without_a_cluster_or_of_another(etcd))


async def _prefix_without_a_cluster_or_of_another(etcd: EtcdCluster) -> None:
    view = EtcdMetadata(_url(etcd))
    with pytest.raises(ClusterMismatchError, match="no cluster under prefix"):
        await view.start(timeout_ms=5_000)
    await view.stop()
    b = Brokers(_url(etcd))
    try:
        await b.start(1)
        other = EtcdMetadata(b.url, cluster_id=uuid.uuid4())
        with pytest.raises(ClusterMismatchError, match="belongs to cluster"):
            await other.start(timeout_ms=5_000)
        await other.stop()
    finally:
        await b.stop()


@needs_etcd
def test_walmgr_refuses_the_etcd_prefix_of_another_cluster(etcd: EtcdCluster, tmp_path: object) -> None:
    asyncio.run(_walmgr_refuses_the_etcd_prefix_of_another_cluster(etcd, tmp_path))


async def _walmgr_refuses_the_etcd_prefix_of_another_cluster(etcd: EtcdCluster, tmp_path: object) -> None:
    from walmgr.config import WalmgrConfig
    from walmgr.daemon import Walmgr

    a, other = Brokers(_url(etcd)), Brokers(_url(etcd))
    try:
        await a.start(1)
        await other.start(1)
        registry = str(tmp_path / "registry")  # type: ignore[operator]
        store = "file://" + str(tmp_path / "objects")  # type: ignore[operator]
        mgr = Walmgr(WalmgrConfig.for_cli(store, registry, metadata=a.url))
        await mgr.start(metadata_timeout_ms=10_000)
        assert mgr.cluster_id == a.admin.cluster_id
        await mgr.stop()
        mgr = Walmgr(WalmgrConfig.for_cli(store, registry, metadata=other.url))
        with pytest.raises(ClusterMismatchError):
            await mgr.start(metadata_timeout_ms=10_000)
        await mgr.stop()
    finally:
        await a.stop()
        await other.stop()


@needs_etcd
def test_view_follows_changes_through_member_kills(tmp_path: object) -> None:
    asyncio.run(_view_follows_changes_through_member_kills(tmp_path))


async def _view_follows_changes_through_member_kills(tmp_path: object) -> None:
    """Kill the etcd members one at a time (a quorum stays): the watch moves
    to a live member and every change still reaches the view."""
    with EtcdCluster(str(tmp_path)) as cluster:
        b = Brokers(cluster.url("/kills"))
        try:
            await b.start(3)
            for round_, member in enumerate(range(cluster.members)):
                await asyncio.to_thread(cluster.kill, member)
                name = f"t{round_}"
                answer = None
                for _ in range(50):  # retriable while the channel fails over
                    answer = (await b.admin.create_topics({name: (2, 3)}))[name]
                    if not isinstance(answer, Errors):
                        break
                    await asyncio.sleep(0.2)
                assert not isinstance(answer, Errors), answer
                for m in b.sources.values():
                    assert await m.wait_for(lambda m=m, name=name: m.topic(name) is not None, WAIT_S)  # type: ignore[misc]
                await asyncio.to_thread(cluster.restart, member)
        finally:
            await b.stop()


# ------------------------------------------------------------------ CLIs


@needs_etcd
def test_topics_create_on_etcd(etcd: EtcdCluster, capsys: pytest.CaptureFixture[str]) -> None:
    """``partlog topics create --metadata``: a prefix without a cluster is a
    one-line configuration error; with brokers it creates the topic."""
    from partlog.tools.cli import main

    empty = _url(etcd)
    assert main(["topics", "create", "t", "--partitions", "2", "--metadata", empty, "--timeout-ms", "5000"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "no cluster under prefix" in err

    async def two_brokers(b: Brokers) -> None:
        await b.start(2)
        code = await asyncio.to_thread(
            main, ["topics", "create", "t", "--partitions", "2", "--replication-factor", "2", "--metadata", b.url]
        )
        assert code == 0
        assert await b.admin.wait_for(lambda: b.admin.topic("t") is not None, WAIT_S)

    with_brokers(etcd, two_brokers)
    assert "topic t id" in capsys.readouterr().out


# ------------------------------------------- regressions of the hostile review


@needs_etcd
def test_producer_ids_never_restart_after_the_counter_is_deleted(etcd: EtcdCluster) -> None:
    async def body(b: Brokers) -> None:
        m = await b.add(1)
        first = await m.allocate_producer_ids(1)
        assert not isinstance(first, Errors) and first.first_producer_id == 0
        c = await m.conn.client()
        await c.delete(m.keys.producer_ids)
        assert await m.allocate_producer_ids(1) == Errors.COORDINATOR_NOT_AVAILABLE
        fresh = await b.add(2)  # a process that never saw a block
        assert await fresh.allocate_producer_ids(2) == Errors.COORDINATOR_NOT_AVAILABLE
        await c.put(m.keys.producer_ids, msgpack.packb(0))  # lowered: refused too
        assert await m.allocate_producer_ids(1) == Errors.COORDINATOR_NOT_AVAILABLE

    with_brokers(etcd, body)


@needs_etcd
def test_a_stale_plan_never_overwrites_a_newer_partition(etcd: EtcdCluster) -> None:
    """The acting controller's plan was made before a leader's ISR change
    landed: its write must fail, not put back the state it planned on."""

    async def body(b: Brokers) -> None:
        await b.start(3)
        await b.admin.create_topics({"t": (1, 3)})
        ctl = next(m for m in b.sources.values() if m.is_controller)
        assert await ctl.wait_for(lambda: ctl.topic("t") is not None, WAIT_S)
        t = ctl.topic("t")
        assert t is not None
        tp, p = TopicIdPartition(t.topic_id, 0), t.partitions[0]
        # A plan made on a view where the last replica is no longer accepted.
        gone = p.replicas[-1]
        planned_on = copy.deepcopy(ctl.view)
        planned_on.incarnations[gone] = -1
        stale = plan(planned_on, unclean=False, elect_preferred=False)
        assert [ch.tp for ch in stale.changes] == [tp]
        # Meanwhile the leader commits its own ISR change.
        leader = b.sources[p.leader]
        assert await leader.wait_for(lambda: leader.partition(tp) == p, WAIT_S)
        shrink = tuple(r for r in p.isr if r != p.replicas[1])
        committed = await leader.alter_partition(p.leader, tp, p.leader_epoch, p.partition_epoch, shrink)
        assert isinstance(committed, PartitionInfo)
        assert await ctl.wait_for(lambda: ctl.view.part_revision(tp) > 0, WAIT_S)
        conflicts = ctl.controller_conflicts
        assert ctl.session is not None and ctl.acting is not None
        cand = ctl.keys.candidate(ctl.session.lease_id)
        await ctl.acting.write_plan(stale, cand, ctl.view.candidates[cand])
        assert ctl.controller_conflicts == conflicts + 1
        c = await ctl.conn.client()
        stored = await c.get(ctl.keys.part(tp))
        assert msgpack.unpackb(stored.value)[3] == list(committed.isr)

    with_brokers(etcd, body)


@needs_etcd
def test_a_second_session_for_one_broker_id_waits(etcd: EtcdCluster) -> None:
    """Two processes with one broker id: the second waits for the first's
    session to end (Kafka's DUPLICATE_BROKER_REGISTRATION), it does not
    fence it, and the two never take turns."""
    from partlog.controller.view import ControllerUnavailableError

    async def body(b: Brokers) -> None:
        first = await b.add(1)
        twin = EtcdMetadata(b.url, BrokerInfo(1, "az1", "127.0.0.1", 9999), session_timeout_ms=SESSION_MS)
        with pytest.raises(ControllerUnavailableError):
            await twin.start(timeout_ms=3 * SESSION_MS)
        assert twin.duplicate_waits > 0 and twin.broker_epoch == -1
        await twin.stop()
        assert first.view.brokers[1].epoch == first.broker_epoch and first.accepted
        await first.stop(revoke=True)
        del b.sources[1]
        again = await b.add(1)  # the id is free: registers at once
        assert again.broker_epoch > first.broker_epoch

    with_brokers(etcd, body)
