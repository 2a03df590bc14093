"""Partition reassignment on the embedded controller (real LMDB): Kafka's
codes and messages, completion wherever the ISR changes, the wire formats,
and a hypothesis state machine of start / replace / cancel / AlterPartition
/ fencing / registration against a small reference model
(docs/design/reassignment.md, "Tests").  The controller RPC and etcd run
the same flow in tests/integration/test_controller_rpc_reassign.py and
tests/system/test_etcd_reassignment.py."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path
from typing import Any

import msgpack
import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from partlog.controller.cluster_meta import NO_LEADER, BrokerInfo, PartitionInfo
from partlog.controller.core import Controller
from partlog.controller.etcd_layout import dec_part, enc_part
from partlog.controller.reassignment import (
    NO_REASSIGNMENT_MESSAGE,
    Reassignment,
    ReassignmentAdmin,
    dec_alter_reassignments,
    dec_alter_reassignments_response,
    dec_list_reassignments,
    dec_list_reassignments_response,
    enc_alter_reassignments,
    enc_alter_reassignments_response,
    enc_list_reassignments,
    enc_list_reassignments_response,
    listed,
    reassigning,
    target_of,
)
from partlog.controller.rules import Refused
from partlog.controller.wire import dec_partition, enc_partition
from partlog.kafka.errors import Errors
from partlog.kafka.records import TopicIdPartition
from partlog.rpc.methods import CONTROLLER_SCHEMAS
from partlog.rpc.wire import WireError
from tests.unit.test_controller import config, create, part, register, tp_of

Key = tuple[str, int]


def _isr_change(c: Controller, epochs: dict[int, int], tp: Any, isr: tuple[int, ...]) -> PartitionInfo | Errors:
    p = part(c, tp)
    return c.alter_partition(p.leader, epochs[p.leader], tp, p.leader_epoch, p.partition_epoch, isr)


def test_move_completes_when_the_target_is_in_sync_and_moves_the_leader(tmp_path: Path) -> None:
    c = Controller(config(tmp_path / "ctl"), now_ms=0)
    epochs = register(c, [1, 2, 3, 4, 5])
    create(c, "t", 1, 2)
    tp = tp_of(c, "t")
    before = part(c, tp)
    leader = before.leader
    target = tuple(b for b in (1, 2, 3, 4, 5) if b not in before.replicas)[:2]
    assert c.alter_reassignments({("t", 0): target}) == {("t", 0): None}
    c.check()
    moving = part(c, tp)
    assert moving.replicas == target + tuple(sorted(before.replicas))
    assert moving.adding == tuple(sorted(target)) and moving.removing == tuple(sorted(before.replicas))
    assert moving.leader == leader and moving.isr == before.isr
    assert (moving.leader_epoch, moving.partition_epoch) == (before.leader_epoch, before.partition_epoch + 1)
    assert listed(c.snapshot().topics, None) == [Reassignment("t", 0, moving.replicas, moving.adding, moving.removing)]
    # One of two new replicas in sync: still moving.
    half = _isr_change(c, epochs, tp, (*before.isr, target[0]))
    assert isinstance(half, PartitionInfo) and reassigning(half)
    # Both: done in the same commit; the old leader is not in the target, so
    # it gives way to the first target replica and hears Kafka's answer.
    assert _isr_change(c, epochs, tp, (*before.isr, *target)) == Errors.NEW_LEADER_ELECTED
    c.check()
    done = part(c, tp)
    assert done.replicas == target and done.isr == target and not reassigning(done)
    assert done.leader == target[0] and done.leader_epoch == before.leader_epoch + 1
    assert listed(c.snapshot().topics, [("t", 0)]) == []
    c.close()
    # Durable: a reopened controller holds the same state (LMDB).
    again = Controller(config(tmp_path / "ctl"), now_ms=0)
    assert part(again, tp) == done
    again.close()


def test_codes_messages_and_order_of_checks(tmp_path: Path) -> None:
    c = Controller(config(tmp_path / "ctl"), now_ms=0)
    register(c, [1, 2, 3])
    create(c, "t", 1, 2)
    got = c.alter_reassignments(
        {
            ("nope", 0): (1,),
            ("t", 7): None,
            ("t", -1): (1,),
            ("t", 0): None,
        }
    )
    assert got == {
        ("nope", 0): Refused(Errors.UNKNOWN_TOPIC_OR_PARTITION, "Unable to find a topic named nope."),
        ("t", 7): Refused(Errors.UNKNOWN_TOPIC_OR_PARTITION, "Unable to find partition t:7."),
        ("t", -1): Refused(Errors.UNKNOWN_TOPIC_OR_PARTITION, "Unable to find partition t:-1."),
        ("t", 0): Refused(Errors.NO_REASSIGNMENT_IN_PROGRESS, NO_REASSIGNMENT_MESSAGE),
    }
    bad = {(): "an empty replica list.", (3, 9, 8): "broker 8, but no such broker is registered.",
           (2, 1, 2): "the broker 2 more than once."}  # fmt: skip
    for target, why in bad.items():
        answer = c.alter_reassignments({("t", 0): target})[("t", 0)]
        assert answer == Refused(Errors.INVALID_REPLICA_ASSIGNMENT, f"The manual partition assignment includes {why}")
    version = c.version
    # Nothing to do (the same replicas) commits nothing.
    assert c.alter_reassignments({("t", 0): part(c, tp_of(c, "t")).replicas}) == {("t", 0): None}
    assert c.version == version
    c.close()


def test_replace_cancel_and_a_target_already_in_sync(tmp_path: Path) -> None:
    c = Controller(config(tmp_path / "ctl"), now_ms=0)
    register(c, [1, 2, 3, 4, 5])
    create(c, "t", 1, 3)
    tp = tp_of(c, "t")
    p = part(c, tp)
    # Dropping a replica: the target is in the ISR, done at once (leader epoch bumped: replicas shrank).
    keep = p.replicas[:2]
    assert c.alter_reassignments({("t", 0): keep}) == {("t", 0): None}
    shrunk = part(c, tp)
    assert shrunk.replicas == keep and shrunk.isr == keep and not reassigning(shrunk)
    assert shrunk.leader_epoch == p.leader_epoch + 1
    # Start, replace (computed against the union, as Kafka), cancel.
    others = [b for b in (1, 2, 3, 4, 5) if b not in keep]
    c.alter_reassignments({("t", 0): (others[0], keep[0])})
    first = part(c, tp)
    assert first.adding == (others[0],) and first.removing == (keep[1],)
    c.alter_reassignments({("t", 0): (others[1], keep[0])})
    second = part(c, tp)
    assert second.replicas == (others[1], keep[0], *sorted((others[0], keep[1])))
    assert second.adding == (others[1],) and second.removing == tuple(sorted((others[0], keep[1])))
    assert c.alter_reassignments({("t", 0): None}) == {("t", 0): None}
    c.check()
    back = part(c, tp)
    # Kafka's revert: the union without the replicas being added.
    assert back.replicas == tuple(r for r in second.replicas if r != others[1]) and not reassigning(back)
    assert back.leader == shrunk.leader
    c.close()


def test_cancel_that_needs_an_unclean_election_is_refused(tmp_path: Path) -> None:
    c = Controller(config(tmp_path / "ctl"), now_ms=0)
    epochs = register(c, [1, 2, 3])
    create(c, "t", 1, 1)
    tp = tp_of(c, "t")
    old = part(c, tp).leader
    new = next(b for b in (1, 2, 3) if b != old)
    third = next(b for b in (1, 2, 3) if b not in (old, new))
    c.alter_reassignments({("t", 0): (new, third)})
    # The new replica joins, then the old leader is fenced: only an adding replica is in the ISR.
    assert isinstance(_isr_change(c, epochs, tp, (old, new)), PartitionInfo)
    c.register_broker(old, "az1", "127.0.0.1", 9000 + old, 0)  # a new incarnation fences the old one
    c.check()
    p = part(c, tp)
    assert p.leader == new and p.isr == (new,) and reassigning(p)
    assert c.alter_reassignments({("t", 0): None}) == {
        ("t", 0): Refused(
            Errors.INVALID_REPLICA_ASSIGNMENT,
            "Unable to revert partition assignment for t:0 because it would require an unclean leader election.",
        )
    }
    c.close()


def test_elections_during_a_move_prefer_target_replicas(tmp_path: Path) -> None:
    """Kafka's builder elects over the union, target first: with the leader
    fenced, the ISR member in the target leads, not an earlier old replica."""
    c = Controller(config(tmp_path / "ctl"), now_ms=0)
    epochs = register(c, [1, 2, 3, 4])
    create(c, "t", 1, 3)
    tp = tp_of(c, "t")
    p = part(c, tp)
    first, second, third = p.replicas
    fourth = next(b for b in (1, 2, 3, 4) if b not in p.replicas)
    assert c.alter_reassignments({("t", 0): (fourth, third)}) == {("t", 0): None}
    moving = part(c, tp)
    assert moving.replicas == (fourth, third, *sorted((first, second)))
    for b in (second, third, fourth):
        assert c.heartbeat(b, epochs[b], 2_000) == Errors.NONE
    c.tick(2_000)  # the leader (first) is fenced
    c.check()
    after = part(c, tp)
    assert after.leader == third and reassigning(after)  # not second, which came first in the old order
    assert after.leader_epoch == moving.leader_epoch + 1
    c.close()


def test_etcd_plan_completes_a_move_its_election_finishes() -> None:
    """etcd's acting controller (sans-IO): the leader of a partition moving
    off it dies; the unclean election puts the target's replica in the ISR,
    which completes the move in the same write."""
    import uuid

    from partlog.controller.etcd_controller import plan
    from partlog.controller.etcd_layout import KV, EtcdView, Keys, enc_broker, enc_topic, pack_value

    keys, tid = Keys("/c"), uuid.UUID(int=7)
    tp = TopicIdPartition(tid, 0)
    moving = PartitionInfo(1, 0, (2, 1), (1,), 1, (2,), (1,))
    view = EtcdView(keys)
    view.load(
        [
            KV(keys.cluster_id, str(uuid.UUID(int=1)).encode(), 1, 1),
            KV(keys.broker(2), enc_broker(BrokerInfo(2, "a", "h", 1), 5), 2, 2),  # broker 1 is gone
            KV(keys.incarnation(2), pack_value(2), 3, 3),
            KV(keys.topic("t"), enc_topic(tid, [(1,)]), 4, 4),
            KV(keys.part(tp), enc_part(moving), 5, 5),
        ],
        5,
    )
    assert view.refused == 0 and view.partition(tp) == moving
    (change,) = plan(view, unclean=True, elect_preferred=False).changes
    assert change.tp == tp and change.unclean
    assert change.new == PartitionInfo(2, 1, (2,), (2,), 2)
    # Without unclean elections it goes offline, still moving (its last ISR member is the old replica).
    (clean,) = plan(view, unclean=False, elect_preferred=False).changes
    assert clean.new == PartitionInfo(NO_LEADER, 1, (2, 1), (1,), 2, (2,), (1,))


def test_wire_round_trips_and_old_records() -> None:
    settled = PartitionInfo(2, 3, (2, 1), (2,), 5)
    moving = PartitionInfo(2, 3, (4, 2, 1), (2, 1), 6, (4,), (1,))
    # A settled partition encodes exactly as before reassignments existed.
    assert enc_partition(settled) == [2, 3, [2, 1], [2], 5]
    assert enc_part(settled) == msgpack.packb([2, 3, [2, 1], [2], 5])
    old_record = msgpack.packb([2, 3, [2, 1], [2], 5])  # written by an older controller
    assert dec_partition(msgpack.unpackb(old_record)) == settled
    assert dec_part("p", old_record) == settled
    for p in (settled, moving):
        assert dec_partition(msgpack.unpackb(msgpack.packb(enc_partition(p)))) == p
        assert dec_part("p", enc_part(p)) == p
    with pytest.raises(WireError):
        dec_partition([2, 3, [2], [2], 5, [4]])
    from partlog.controller.cluster_meta import MetadataError

    with pytest.raises(MetadataError):  # removing is not the replicas' tail
        dec_part("p", msgpack.packb([2, 3, [1, 2, 4], [2], 6, [4], [1]]))
    changes: dict[Key, tuple[int, ...] | None] = {("t", 0): (1, 2), ("u", 3): None}
    body = msgpack.unpackb(msgpack.packb(enc_alter_reassignments(changes)))
    CONTROLLER_SCHEMAS["alter_reassignments"].check(body, "alter_reassignments")
    assert dec_alter_reassignments(body) == changes
    with pytest.raises(WireError, match="named twice"):
        dec_alter_reassignments({"partitions": [["t", 0, None], ["t", 0, [1]]]})
    answers: dict[Key, Refused | None] = {("t", 0): None, ("u", 3): Refused(Errors.NO_REASSIGNMENT_IN_PROGRESS, "x")}
    assert dec_alter_reassignments_response(enc_alter_reassignments_response(9, answers)) == (9, answers)
    for asked in (None, [("t", 0), ("u", 1)]):
        body = msgpack.unpackb(msgpack.packb(enc_list_reassignments(asked)))
        CONTROLLER_SCHEMAS["list_reassignments"].check(body, "list_reassignments")
        assert dec_list_reassignments(body) == asked
    found = [Reassignment("t", 0, (4, 2, 1), (4,), (1,))]
    assert dec_list_reassignments_response(enc_list_reassignments_response(found)) == found


# ----------------------------------------------------------- the state machine

BROKERS = (1, 2, 3, 4, 5)


class Model:
    """What a reassignment makes of one partition's replicas, decided from
    the ISR the controller reports (elections are tested elsewhere)."""

    def __init__(self, replicas: tuple[int, ...]) -> None:
        self.replicas = replicas
        self.adding: tuple[int, ...] = ()
        self.removing: tuple[int, ...] = ()

    def target(self) -> tuple[int, ...]:
        return self.replicas[: len(self.replicas) - len(self.removing)]

    def settle(self, isr: tuple[int, ...]) -> None:
        if (self.adding or self.removing) and set(self.target()) <= set(isr):
            self.replicas, self.adding, self.removing = self.target(), (), ()

    def start(self, target: tuple[int, ...], isr: tuple[int, ...]) -> None:
        removing = tuple(sorted(set(self.replicas) - set(target)))
        self.adding = tuple(sorted(set(target) - set(self.replicas)))
        self.replicas, self.removing = target + removing, removing
        self.settle(isr)

    def cancel(self) -> None:
        self.replicas = tuple(r for r in self.replicas if r not in self.adding)
        self.adding = self.removing = ()


class ReassignmentMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.dir = tempfile.mkdtemp(prefix="reassign-sm-")
        self.now = 0
        self.c = Controller(config(Path(self.dir) / "ctl", unclean_leader_election_enable=True), now_ms=0)
        self.epochs = register(self.c, list(BROKERS))
        self.topic = create(self.c, "t", 2, 2)
        self.models = [Model(p.replicas) for p in self.topic.partitions]

    def teardown(self) -> None:
        self.c.close()
        shutil.rmtree(self.dir, ignore_errors=True)

    def _p(self, i: int) -> PartitionInfo:
        return part(self.c, tp_of(self.c, "t", i))

    def _alive(self) -> list[int]:
        return [b for b in BROKERS if (r := self.c.registration(b)) is not None and not r.fenced]

    def _settle_all(self) -> None:
        for i, m in enumerate(self.models):
            m.settle(self._p(i).isr)

    @rule(i=st.integers(0, 1), wanted=st.lists(st.sampled_from(BROKERS), min_size=1, max_size=4, unique=True))
    def start_or_replace(self, i: int, wanted: list[int]) -> None:
        before = self._p(i)
        answer = self.c.alter_reassignments({("t", i): tuple(wanted)})
        assert answer == {("t", i): None}
        self.models[i].start(tuple(wanted), before.isr)

    @rule(i=st.integers(0, 1))
    def cancel(self, i: int) -> None:
        before = self._p(i)
        answer = self.c.alter_reassignments({("t", i): None})[("t", i)]
        m = self.models[i]
        if not (m.adding or m.removing):
            assert answer == Refused(Errors.NO_REASSIGNMENT_IN_PROGRESS, NO_REASSIGNMENT_MESSAGE)
            return
        assert answer is None, (answer, before)  # unclean election is enabled here
        m.cancel()

    @rule(i=st.integers(0, 1), data=st.data())
    def alter_isr(self, i: int, data: st.DataObject) -> None:
        p = self._p(i)
        if p.leader == NO_LEADER:
            return
        alive = set(self._alive())
        others = [r for r in p.replicas if r != p.leader and (r in alive or r in p.isr)]
        isr = (p.leader, *data.draw(st.lists(st.sampled_from(others), unique=True) if others else st.just([])))
        m = self.models[i]
        leaves = (m.adding or m.removing) and set(m.target()) <= set(isr) and p.leader not in m.target()
        answer = _isr_change(self.c, self.epochs, tp_of(self.c, "t", i), tuple(isr))
        assert (answer == Errors.NEW_LEADER_ELECTED) == bool(leaves), (answer, p, isr)
        assert isinstance(answer, PartitionInfo) or answer == Errors.NEW_LEADER_ELECTED
        m.settle(self._p(i).isr)

    @precondition(lambda self: len(self._alive()) > 1)
    @rule(data=st.data())
    def fence(self, data: st.DataObject) -> None:
        victim = data.draw(st.sampled_from(self._alive()))
        self.now += 2_000
        for b in self._alive():
            if b != victim:
                assert self.c.heartbeat(b, self.epochs[b], self.now) == Errors.NONE
        self.c.tick(self.now)
        self._settle_all()

    @rule()
    def elect_preferred(self) -> None:
        self.c.elect_preferred_leaders()
        self._settle_all()

    @rule(b=st.sampled_from(BROKERS))
    def register(self, b: int) -> None:
        epoch = self.c.register_broker(b, f"az{b % 3}", "127.0.0.1", 9000 + b, self.now)
        assert isinstance(epoch, int)
        self.epochs[b] = epoch
        self._settle_all()

    @invariant()
    def agrees_with_the_model(self) -> None:
        self.c.check()
        for i, m in enumerate(self.models):
            p = self._p(i)
            assert (p.replicas, p.adding, p.removing) == (m.replicas, m.adding, m.removing), (p, vars(m))
            assert p.leader == NO_LEADER or p.leader in p.isr
            assert set(p.isr) <= set(p.replicas)
            assert p.replicas == target_of(p) + p.removing
            # Never left in progress with the target in the ISR (the model
            # checks the other way: it completes whenever that holds).
            assert not reassigning(p) or not set(target_of(p)) <= set(p.isr)


TestReassignmentMachine = ReassignmentMachine.TestCase
TestReassignmentMachine.settings = settings(max_examples=60, stateful_step_count=25, deadline=None)


def test_admin_protocol_is_runtime_checkable() -> None:
    from partlog.controller.client import ControllerMetadata
    from partlog.controller.etcd_meta import EtcdMetadata

    for cls in (ControllerMetadata, EtcdMetadata):
        assert all(callable(getattr(cls, n, None)) for n in ("alter_reassignments", "list_reassignments"))
    assert not isinstance(object(), ReassignmentAdmin)
