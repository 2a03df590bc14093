"""The embedded controller's sans-IO core: elections, epochs, AlterPartition,
assignment, persistence, producer ids, topic deletion (the asyncio server
and its clients over real TCP are in tests/integration/test_controller_rpc.py).
"""

from __future__ import annotations

import shutil
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import lmdb
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from partlog.controller.cluster_meta import NO_LEADER, BrokerInfo, PartitionInfo, TopicInfo
from partlog.controller.core import Controller, ControllerConfig
from partlog.controller.model import BrokerFenced, LeaderChanged
from partlog.controller.rules import assign_replicas, valid_topic_name
from partlog.controller.state_store import ControllerStateError
from partlog.controller.wire import dec_poll_response, enc_snapshot
from partlog.kafka.errors import Errors
from partlog.kafka.producer_ids import ProducerIdBlock
from partlog.kafka.records import TopicIdPartition

SESSION_MS = 1_000
AZ_OF = {1: "az1", 2: "az2", 3: "az3", 4: "az1", 5: "az2", 6: "az3"}


def config(path: Path | str, **kw: Any) -> ControllerConfig:
    kw.setdefault("broker_session_timeout_ms", SESSION_MS)
    kw.setdefault("leader_imbalance_check_interval_ms", 0)
    return ControllerConfig(str(path), **kw)


@pytest.fixture
def ctl(tmp_path: Path) -> Iterator[Controller]:
    c = Controller(config(tmp_path / "ctl"), now_ms=0)
    yield c
    c.close()


def register(c: Controller, ids: list[int], now: int = 0) -> dict[int, int]:
    epochs = {}
    for b in ids:
        e = c.register_broker(b, AZ_OF[b], "127.0.0.1", 9000 + b, now)
        assert isinstance(e, int)
        epochs[b] = e
    c.check()
    return epochs


def tp_of(c: Controller, name: str, p: int = 0) -> TopicIdPartition:
    """Partition ``p`` of topic ``name`` (ids are random: ask the controller;
    an unknown name gets a fresh id, which no controller knows)."""
    t = next((t for t in c.snapshot().topics if t.name == name), None)
    return TopicIdPartition(t.topic_id if t is not None else uuid.uuid4(), p)


def create(c: Controller, name: str, partitions: int, rf: int) -> TopicInfo:
    t = c.create_topic(name, partitions, rf)
    assert isinstance(t, TopicInfo), t
    c.check()
    return t


def part(c: Controller, tp: TopicIdPartition) -> PartitionInfo:
    p = c.partition(tp)
    assert p is not None
    return p


def beat(c: Controller, epochs: dict[int, int], now: int) -> None:
    for b, e in epochs.items():
        assert c.heartbeat(b, e, now) == Errors.NONE


def kill(c: Controller, epochs: dict[int, int], dead: set[int], now: int) -> None:
    """Everyone but ``dead`` heartbeats at ``now``; then the tick a session later fences ``dead``."""
    for b, e in epochs.items():
        if b not in dead:
            assert c.heartbeat(b, e, now) == Errors.NONE
    for b, e in epochs.items():
        if b not in dead:
            assert c.heartbeat(b, e, now + SESSION_MS) == Errors.NONE
    c.tick(now + SESSION_MS + 1)
    c.check()
    for b in epochs:
        reg = c.registration(b)
        assert reg is not None and reg.fenced == (b in dead)


def shrink_isr(c: Controller, epochs: dict[int, int], tp: TopicIdPartition, isr: tuple[int, ...]) -> PartitionInfo:
    p = part(c, tp)
    answer = c.alter_partition(p.leader, epochs[p.leader], tp, p.leader_epoch, p.partition_epoch, isr)
    assert isinstance(answer, PartitionInfo), answer
    c.check()
    return answer


# ------------------------------------------------------------ assignment


def test_assignment_puts_one_replica_per_az_and_spreads_leaders(ctl: Controller) -> None:
    register(ctl, [1, 2, 3, 4, 5, 6])
    t = create(ctl, "orders", 12, 3)
    assert t.topic_id.version == 4  # random, as Kafka's topic ids
    for p in t.partitions:
        assert len({AZ_OF[r] for r in p.replicas}) == 3, p
        assert p.leader == p.replicas[0] and p.isr == p.replicas and p.leader_epoch == p.partition_epoch == 0
    assert sorted(t.leaders) == sorted([1, 2, 3, 4, 5, 6] * 2)
    # Followers spread too: every broker holds the same number of replicas.
    counts = {b: sum(b in p.replicas for p in t.partitions) for b in range(1, 7)}
    assert set(counts.values()) == {6}


def test_assignment_with_unequal_azs() -> None:
    brokers = [BrokerInfo(1, "a"), BrokerInfo(4, "a"), BrokerInfo(7, "a"), BrokerInfo(2, "b"), BrokerInfo(3, "c")]
    for rf in (1, 2, 3):
        for reps in assign_replicas(brokers, 10, rf, 0):
            assert len(reps) == rf and len({next(b.az for b in brokers if b.broker_id == r) for r in reps}) == rf
    # rf above the AZ count: distinct brokers, every AZ used.
    for reps in assign_replicas(brokers, 10, 5, 3):
        assert sorted(reps) == [1, 2, 3, 4, 7]


@settings(max_examples=200, deadline=None)
@given(
    azs=st.lists(st.integers(1, 4), min_size=1, max_size=5),
    partitions=st.integers(1, 20),
    start=st.integers(0, 50),
    data=st.data(),
)
def test_assignment_property(azs: list[int], partitions: int, start: int, data: st.DataObject) -> None:
    brokers = [BrokerInfo(100 - i, f"az{z}") for i, z in enumerate(azs)]
    rf = data.draw(st.integers(1, len(brokers)))
    by_id = sorted(b.broker_id for b in brokers)
    az = {b.broker_id: b.az for b in brokers}
    for p, reps in enumerate(assign_replicas(brokers, partitions, rf, start)):
        assert len(reps) == rf == len(set(reps))
        assert reps[0] == by_id[(start + p) % len(brokers)]
        assert len({az[r] for r in reps}) == min(rf, len(set(az.values())))


def test_create_topic_errors_and_idempotent_recreate(ctl: Controller) -> None:
    assert ctl.create_topic("t", 1, 1) == Errors.INVALID_REPLICATION_FACTOR  # no brokers yet
    epochs = register(ctl, [1, 2, 3])
    assert ctl.create_topic("t", 1, 4) == Errors.INVALID_REPLICATION_FACTOR
    assert ctl.create_topic("t", 1, 0) == Errors.INVALID_REPLICATION_FACTOR
    assert ctl.create_topic("t", 0, 1) == Errors.INVALID_PARTITIONS
    for bad in ("", ".", "..", "a/b", "x" * 250, "späti"):
        assert not valid_topic_name(bad)
        assert ctl.create_topic(bad, 1, 1) == Errors.INVALID_REQUEST
    t = create(ctl, "t", 3, 2)
    version = ctl.version
    assert ctl.create_topic("t", 3, 2) == t and ctl.version == version  # same shape: the topic as it is
    assert ctl.create_topic("t", 4, 2) == Errors.TOPIC_ALREADY_EXISTS
    assert ctl.create_topic("t", 3, 1) == Errors.TOPIC_ALREADY_EXISTS
    kill(ctl, epochs, {3}, 0)
    assert ctl.create_topic("u", 1, 3) == Errors.INVALID_REPLICATION_FACTOR  # only alive brokers count
    u = create(ctl, "u", 2, 2)
    assert all(3 not in p.replicas for p in u.partitions)


# -------------------------------------------------------------- elections


def test_dead_leader_is_replaced_by_next_isr_replica_only(ctl: Controller) -> None:
    epochs = register(ctl, [1, 2, 3])
    create(ctl, "t", 1, 3)
    tp = tp_of(ctl, "t")
    r0, _r1, r2 = part(ctl, tp).replicas
    shrink_isr(ctl, epochs, tp, (r0, r2))  # r1 fell behind
    assert part(ctl, tp).partition_epoch == 1
    kill(ctl, epochs, {r0}, 0)
    p = part(ctl, tp)
    # r1 is alive and comes first in replicas, but it is not in the ISR.
    assert (p.leader, p.isr, p.leader_epoch, p.partition_epoch) == (r2, (r2,), 1, 2)
    assert ctl.leader_elections == 1 and ctl.unclean_leader_elections == 0
    events = ctl.take_events()
    assert BrokerFenced(r0, epochs[r0], "session_timeout") in events
    assert [e.leader for e in events if isinstance(e, LeaderChanged)] == [r2]


def test_follower_death_only_shrinks_isr(ctl: Controller) -> None:
    epochs = register(ctl, [1, 2, 3])
    create(ctl, "t", 1, 3)
    tp = tp_of(ctl, "t")
    before = part(ctl, tp)
    kill(ctl, epochs, {before.replicas[1]}, 0)
    p = part(ctl, tp)
    assert p.leader == before.leader and p.leader_epoch == 0 and p.partition_epoch == 1
    assert p.isr == (before.replicas[0], before.replicas[2])


def test_last_isr_member_dies_then_comes_back_as_leader(ctl: Controller) -> None:
    epochs = register(ctl, [1, 2])
    create(ctl, "t", 1, 2)
    tp = tp_of(ctl, "t")
    leader, follower = part(ctl, tp).replicas
    shrink_isr(ctl, epochs, tp, (leader,))
    kill(ctl, epochs, {leader}, 0)
    p = part(ctl, tp)
    # Offline: the follower is alive but not in sync; the last ISR member
    # leaves the ISR for the ELR (KIP-966).
    assert (p.leader, p.isr, p.elr, p.leader_epoch) == (NO_LEADER, (), (leader,), 1)
    assert ctl.offline_partitions == 1 and ctl.leader_elections == 0
    assert [b.broker_id for b in ctl.snapshot().brokers] == [follower]
    # The next ticks change nothing without unclean election.
    version = ctl.version
    assert ctl.heartbeat(follower, epochs[follower], 10 * SESSION_MS) == Errors.NONE
    ctl.tick(10 * SESSION_MS)
    assert ctl.version == version
    epoch = ctl.register_broker(leader, AZ_OF[leader], "127.0.0.1", 1, 10 * SESSION_MS)
    assert isinstance(epoch, int) and epoch > max(epochs.values())
    p = part(ctl, tp)
    assert (p.leader, p.isr, p.leader_epoch) == (leader, (leader,), 2)
    assert ctl.offline_partitions == 0 and ctl.leader_elections == 1
    ctl.check()


def test_unclean_election_only_when_enabled(tmp_path: Path) -> None:
    for unclean in (False, True):
        with Controller(config(tmp_path / str(unclean), unclean_leader_election_enable=unclean), now_ms=0) as c:
            epochs = register(c, [1, 2, 3])
            create(c, "t", 1, 3)
            tp = tp_of(c, "t")
            r0, r1, _r2 = part(c, tp).replicas
            shrink_isr(c, epochs, tp, (r0,))
            kill(c, epochs, {r0}, 0)
            p = part(c, tp)
            if unclean:
                assert (p.leader, p.isr, p.leader_epoch) == (r1, (r1,), 1)
                assert c.unclean_leader_elections == 1 and c.leader_elections == 1
                assert any(isinstance(e, LeaderChanged) and e.unclean for e in c.take_events())
            else:
                assert (p.leader, p.isr, p.elr) == (NO_LEADER, (), (r0,))
                assert c.unclean_leader_elections == 0


def test_unclean_election_when_a_replica_returns(tmp_path: Path) -> None:
    with Controller(config(tmp_path / "c", unclean_leader_election_enable=True), now_ms=0) as c:
        epochs = register(c, [1, 2])
        create(c, "t", 1, 2)
        tp = tp_of(c, "t")
        leader, follower = part(c, tp).replicas
        shrink_isr(c, epochs, tp, (leader,))
        kill(c, epochs, {leader, follower}, 0)
        assert part(c, tp).leader == NO_LEADER
        register(c, [follower], now=5 * SESSION_MS)
        p = part(c, tp)
        assert (p.leader, p.isr) == (follower, (follower,)) and c.unclean_leader_elections == 1


def test_fast_restart_fences_the_old_incarnation(ctl: Controller) -> None:
    epochs = register(ctl, [1, 2])
    create(ctl, "t", 1, 2)
    tp = tp_of(ctl, "t")
    leader, follower = part(ctl, tp).replicas
    ctl.take_events()
    # The leader restarts within its session timeout: its old incarnation is dead.
    new_epoch = ctl.register_broker(leader, AZ_OF[leader], "127.0.0.1", 1, 10)
    assert isinstance(new_epoch, int) and new_epoch > max(epochs.values())
    p = part(ctl, tp)
    assert (p.leader, p.isr, p.leader_epoch) == (follower, (follower,), 1)
    assert BrokerFenced(leader, epochs[leader], "new_incarnation") in ctl.take_events()
    assert ctl.heartbeat(leader, epochs[leader], 20) == Errors.STALE_BROKER_EPOCH
    assert ctl.heartbeat(leader, new_epoch, 20) == Errors.NONE
    ctl.check()


def test_heartbeat_errors(ctl: Controller) -> None:
    epochs = register(ctl, [1, 2])
    assert ctl.heartbeat(1, epochs[1], 1) == Errors.NONE
    assert ctl.heartbeat(7, 1, 1) == Errors.BROKER_ID_NOT_REGISTERED
    assert ctl.heartbeat(1, epochs[1] + 100, 1) == Errors.STALE_BROKER_EPOCH
    kill(ctl, epochs, {1}, 1)
    assert ctl.heartbeat(1, epochs[1], 5 * SESSION_MS) == Errors.BROKER_ID_NOT_REGISTERED
    assert ctl.allocate_producer_ids(1, epochs[1]) == Errors.BROKER_ID_NOT_REGISTERED
    assert isinstance(ctl.allocate_producer_ids(2, epochs[2]), ProducerIdBlock)


def test_preferred_leader_election(tmp_path: Path) -> None:
    interval = 10 * SESSION_MS
    with Controller(config(tmp_path / "c", leader_imbalance_check_interval_ms=interval), now_ms=0) as c:
        epochs = register(c, [1, 2])
        create(c, "t", 1, 2)
        tp = tp_of(c, "t")
        preferred, other = part(c, tp).replicas
        kill(c, epochs, {preferred}, 0)
        assert part(c, tp).leader == other
        epochs[preferred] = register(c, [preferred], now=2 * SESSION_MS)[preferred]
        assert part(c, tp).leader == other  # not in the ISR yet
        shrink_isr(c, epochs, tp, (preferred, other))  # the leader lets it back in
        beat(c, epochs, 3 * SESSION_MS)
        c.tick(3 * SESSION_MS)  # before the check interval: nothing
        assert part(c, tp).leader == other
        beat(c, epochs, interval)
        c.tick(interval)
        p = part(c, tp)
        assert (p.leader, p.leader_epoch, p.isr) == (preferred, 2, (preferred, other))
        assert c.preferred_leader_elections == 1
        c.check()


# ----------------------------------------------------------- AlterPartition


def test_alter_partition_validation(ctl: Controller) -> None:
    epochs = register(ctl, [1, 2, 3, 4])
    create(ctl, "t", 1, 3)
    tp = tp_of(ctl, "t")
    p = part(ctl, tp)
    leader, f1, f2 = p.replicas
    outsider = next(b for b in epochs if b not in p.replicas)
    le, pe = p.leader_epoch, p.partition_epoch

    def alter(
        isr: tuple[int, ...], *, broker: int = leader, epoch: int | None = None, t: TopicIdPartition = tp,
        leader_epoch: int = le, partition_epoch: int = pe,
    ) -> PartitionInfo | Errors:  # fmt: skip
        e = epochs.get(broker, 1) if epoch is None else epoch
        return ctl.alter_partition(broker, e, t, leader_epoch, partition_epoch, isr)

    assert alter((leader,), broker=99) == Errors.BROKER_ID_NOT_REGISTERED
    assert alter((leader,), epoch=epochs[leader] - 1) == Errors.STALE_BROKER_EPOCH
    assert alter((leader,), t=tp_of(ctl, "t", 1)) == Errors.UNKNOWN_TOPIC_OR_PARTITION
    assert alter((leader,), t=tp_of(ctl, "nope")) == Errors.UNKNOWN_TOPIC_OR_PARTITION
    assert alter((f1,), broker=f1) == Errors.NOT_LEADER_OR_FOLLOWER
    assert alter((leader,), leader_epoch=le + 1) == Errors.FENCED_LEADER_EPOCH
    assert alter((leader,), partition_epoch=pe + 1) == Errors.INVALID_UPDATE_VERSION
    assert alter((leader, outsider)) == Errors.INELIGIBLE_REPLICA  # not a replica
    assert alter((f1, f2)) == Errors.INELIGIBLE_REPLICA  # without the leader
    assert alter((leader, leader)) == Errors.INVALID_REQUEST
    version = ctl.version
    assert alter((leader, f1, f2)) == p and ctl.version == version  # unchanged: the current state

    shrunk = alter((f2, leader))  # any order in, replicas order out
    assert isinstance(shrunk, PartitionInfo)
    assert (shrunk.isr, shrunk.partition_epoch, shrunk.leader_epoch) == ((leader, f2), pe + 1, le)
    assert ctl.version == version + 1
    assert alter((leader,)) == Errors.INVALID_UPDATE_VERSION  # the old partition epoch is stale now
    kill(ctl, epochs, {f1}, 0)
    p = part(ctl, tp)
    assert alter((leader, f1, f2), partition_epoch=p.partition_epoch) == Errors.INELIGIBLE_REPLICA  # f1 is dead
    epochs[f1] = register(ctl, [f1], now=5 * SESSION_MS)[f1]
    grown = alter((leader, f1, f2), partition_epoch=p.partition_epoch)
    assert isinstance(grown, PartitionInfo) and grown.isr == (leader, f1, f2)
    ctl.check()


# ------------------------------------------------------------- persistence


def test_state_and_version_survive_reopen(tmp_path: Path) -> None:
    path = tmp_path / "ctl"
    with Controller(config(path), now_ms=0) as c:
        epochs = register(c, [1, 2, 3])
        create(c, "a", 3, 2)
        create(c, "b", 2, 3)
        kill(c, epochs, {2}, 0)
        before = c.snapshot()
        regs = c.registrations()
        assert before.version == c.version > 0
    later = 100 * SESSION_MS
    with Controller(config(path), now_ms=later) as c:
        assert c.snapshot() == before and c.registrations() == regs
        c.check()
        # Restored brokers get a full session from the controller's start.
        c.tick(later + SESSION_MS)
        assert [b.broker_id for b in c.snapshot().brokers] == [1, 3]
        assert c.heartbeat(1, epochs[1], later + SESSION_MS) == Errors.NONE
        c.tick(later + SESSION_MS + 1)
        assert [b.broker_id for b in c.snapshot().brokers] == [1]
        assert c.version > before.version
        # Broker epochs are never handed out twice.
        new = c.register_broker(2, "az2", "h", 1, later + SESSION_MS + 2)
        assert isinstance(new, int) and new > max(epochs.values())
        version = c.version
    with Controller(config(path), now_ms=0) as c:
        assert c.version == version


def test_one_controller_per_data_dir(tmp_path: Path) -> None:
    with Controller(config(tmp_path), now_ms=0), pytest.raises(ControllerStateError, match="another controller"):
        Controller(config(tmp_path), now_ms=0)
    with Controller(config(tmp_path), now_ms=0) as c:  # released on close
        assert c.version == 0


class _FailingWrites:
    """An LMDB environment whose write transactions fail (a full or broken disk)."""

    def __init__(self, env: Any) -> None:
        self.env = env

    def begin(self, write: bool = False, **kw: Any) -> Any:
        if write:
            raise lmdb.DiskError("injected")
        return self.env.begin(write=write, **kw)


def test_a_failed_write_changes_nothing(ctl: Controller, monkeypatch: pytest.MonkeyPatch) -> None:
    epochs = register(ctl, [1, 2])
    create(ctl, "t", 1, 2)
    tp = tp_of(ctl, "t")
    before, version = ctl.snapshot(), ctl.version
    with monkeypatch.context() as m:
        m.setattr(ctl._store, "_env", _FailingWrites(ctl._store._env))
        with pytest.raises(lmdb.DiskError):
            ctl.register_broker(3, "az3", "h", 1, 0)
        with pytest.raises(lmdb.DiskError):
            kill(ctl, epochs, {1}, 0)
        p = part(ctl, tp)
        with pytest.raises(lmdb.DiskError):
            ctl.alter_partition(p.leader, epochs[p.leader], tp, p.leader_epoch, p.partition_epoch, (p.leader,))
    # Nothing of it was applied, so nothing of it could have been published or answered.
    assert ctl.snapshot() == before and ctl.version == version and ctl.registration(3) is None
    ctl.check()
    ctl.tick(SESSION_MS + 1)  # the retried tick fences broker 1 now
    assert [b.broker_id for b in ctl.snapshot().brokers] == [2]


def test_config_validation(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="broker_session_timeout_ms"):
        ControllerConfig(str(tmp_path), broker_session_timeout_ms=0)
    with pytest.raises(ValueError, match="leader_imbalance_check_interval_ms"):
        ControllerConfig(str(tmp_path), leader_imbalance_check_interval_ms=-1)
    with pytest.raises(ValueError, match="producer_id_block_size"):
        ControllerConfig(str(tmp_path), producer_id_block_size=0)
    with pytest.raises(ValueError, match="data_dir"):
        ControllerConfig("")


@settings(max_examples=40, deadline=None)
@given(
    steps=st.lists(
        st.one_of(
            st.tuples(st.just("alloc"), st.sampled_from([1, 2, 3])),
            st.tuples(st.just("restart"), st.just(0)),
            st.tuples(st.just("reregister"), st.sampled_from([1, 2, 3])),
        ),
        max_size=40,
    ),
    block_size=st.integers(1, 50),
)
def test_producer_ids_never_repeat_across_restarts(steps: list[tuple[str, int]], block_size: int) -> None:
    root = tempfile.mkdtemp(prefix="partlog-ctl-")
    try:
        cfg = config(root, producer_id_block_size=block_size)
        c = Controller(cfg, now_ms=0)
        epochs = register(c, [1, 2, 3])
        seen: set[int] = set()
        for op, b in steps:
            if op == "alloc":
                block = c.allocate_producer_ids(b, epochs[b])
                assert isinstance(block, ProducerIdBlock) and block.assigned_broker_id == b
                ids = set(range(block.first_producer_id, block.last_producer_id + 1))
                assert not ids & seen, "a producer id handed out twice"
                seen |= ids
            elif op == "restart":
                c.close()
                c = Controller(cfg, now_ms=0)
            else:
                old = epochs[b]
                epochs[b] = register(c, [b])[b]
                assert c.allocate_producer_ids(b, old) == Errors.STALE_BROKER_EPOCH
        c.close()
    finally:
        shutil.rmtree(root, ignore_errors=True)


class ControllerMachine(RuleBasedStateMachine):
    """Random registrations, heartbeats, time, ISR changes and restarts.
    Invariants: the controller's own checks; epochs never go back; a new
    leader comes from the ISR or ELR before the change (clean election)."""

    BROKERS = (1, 2, 3, 4)

    def __init__(self) -> None:
        super().__init__()
        self.root = tempfile.mkdtemp(prefix="partlog-ctl-")
        self.cfg = config(self.root, leader_imbalance_check_interval_ms=3 * SESSION_MS)
        self.now = 0
        self.c = Controller(self.cfg, now_ms=self.now)
        self.epochs: dict[int, int] = {}
        self.last: dict[TopicIdPartition, PartitionInfo] = {}

    def teardown(self) -> None:
        self.c.close()
        shutil.rmtree(self.root, ignore_errors=True)

    @rule(b=st.sampled_from(BROKERS))
    def register(self, b: int) -> None:
        e = self.c.register_broker(b, AZ_OF[b], "127.0.0.1", 1, self.now)
        assert isinstance(e, int) and all(e > old for old in self.epochs.values())
        self.epochs[b] = e

    @rule(b=st.sampled_from(BROKERS))
    def heartbeat(self, b: int) -> None:
        if b in self.epochs:
            self.c.heartbeat(b, self.epochs[b], self.now)

    @rule(ms=st.integers(1, 2 * SESSION_MS))
    def tick(self, ms: int) -> None:
        self.now += ms
        self.c.tick(self.now)

    @rule(name=st.sampled_from(["a", "b"]), partitions=st.integers(1, 3), rf=st.integers(1, 3))
    def create(self, name: str, partitions: int, rf: int) -> None:
        self.c.create_topic(name, partitions, rf)

    @rule(data=st.data())
    def alter(self, data: st.DataObject) -> None:
        parts = [(tp, p) for tp, p in self.last.items() if p.leader != NO_LEADER]
        if not parts:
            return
        tp, p = data.draw(st.sampled_from(parts))
        isr = data.draw(st.sets(st.sampled_from(p.replicas)))
        answer = self.c.alter_partition(
            p.leader, self.epochs[p.leader], tp, p.leader_epoch, p.partition_epoch, tuple(isr | {p.leader})
        )
        if isinstance(answer, Errors):
            assert answer == Errors.INELIGIBLE_REPLICA  # adding a dead replica; all else is valid
        else:
            assert answer.isr == tuple(r for r in p.replicas if r in isr | {p.leader})

    @rule()
    def restart(self) -> None:
        self.c.close()
        self.c = Controller(self.cfg, now_ms=self.now)

    @invariant()
    def consistent(self) -> None:
        self.c.check()
        for t in self.c.snapshot().topics:
            for i, p in enumerate(t.partitions):
                tp = TopicIdPartition(t.topic_id, i)
                old = self.last.get(tp)
                if old is not None:
                    assert p.leader_epoch >= old.leader_epoch and p.partition_epoch >= old.partition_epoch
                    if p.leader != old.leader and p.leader != NO_LEADER:
                        # A clean election: from the ISR as it was before.
                        assert p.leader in old.isr + old.elr, (old, p)
                        assert p.leader_epoch > old.leader_epoch
                    if p != old:
                        assert p.partition_epoch > old.partition_epoch
                self.last[tp] = p


ControllerMachine.TestCase.settings = settings(max_examples=40, stateful_step_count=40, deadline=None)
test_controller_state_machine = ControllerMachine.TestCase


# ---------------------------------------------------------- topic deletion


def test_delete_topics_is_durable_final_and_in_every_snapshot(tmp_path: Path) -> None:
    path = tmp_path / "c"
    with Controller(config(path), now_ms=0) as c:
        register(c, [1, 2, 3])
        doomed = create(c, "doomed", 3, 3)
        kept = create(c, "kept", 2, 3)
        out = c.delete_topics(["doomed", "nothing"])
        c.check()
        assert out == {"doomed": doomed.topic_id, "nothing": Errors.UNKNOWN_TOPIC_OR_PARTITION}
        snap = c.snapshot()
        assert [t.name for t in snap.topics] == ["kept"]
        assert snap.deleted_topics == {doomed.topic_id}
        assert c.partition(TopicIdPartition(doomed.topic_id, 0)) is None
        assert c.delete_topics(["doomed"]) == {"doomed": Errors.UNKNOWN_TOPIC_OR_PARTITION}
        # The name can be used again; the new topic gets a new id.
        again = create(c, "doomed", 1, 1)
        assert again.topic_id != doomed.topic_id
    with Controller(config(path), now_ms=0) as c:
        c.check()
        snap = c.snapshot()
        assert snap.deleted_topics == {doomed.topic_id}
        assert {t.name: t.topic_id for t in snap.topics} == {"kept": kept.topic_id, "doomed": again.topic_id}
        decoded = dec_poll_response(enc_snapshot(snap))
        assert decoded is not None and decoded.deleted_topics == {doomed.topic_id}


def test_a_repeating_uuid_source_cannot_bring_back_a_deleted_topic_id(tmp_path: Path) -> None:
    fixed = uuid.UUID(int=7)
    with Controller(config(tmp_path / "c"), now_ms=0, new_uuid=lambda: fixed) as c:
        register(c, [1])
        assert create(c, "a", 1, 1).topic_id == fixed
        c.delete_topics(["a"])
        assert c.create_topic("b", 1, 1) == Errors.TOPIC_ALREADY_EXISTS
