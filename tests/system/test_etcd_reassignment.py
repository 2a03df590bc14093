"""Partition reassignment on etcd (a real 3-member etcd on loopback, broker
sessions without brokers): each partition's change is one compare-and-swap,
an AlterPartition whose ISR takes in the target completes the move in its
own transaction, and CreatePartitions after a move keeps the moved state
(the rules: tests/unit/test_reassignment.py)."""

from __future__ import annotations

from typing import Any

from partlog.controller.cluster_meta import PartitionInfo
from partlog.controller.partition_admin import NewPartitions
from partlog.controller.reassignment import NO_REASSIGNMENT_MESSAGE, Reassignment, ReassignmentAdmin
from partlog.controller.rules import Refused
from partlog.kafka.errors import Errors
from partlog.kafka.records import TopicIdPartition
from partlog.tools.etcd_launcher import EtcdCluster
from tests.system.test_etcd_metadata import WAIT_S, Brokers, needs_etcd, with_brokers


@needs_etcd
def test_etcd_reassignment_flow(tmp_path: Any) -> None:
    async def body(b: Brokers) -> None:
        await b.start(3)
        admin = b.admin
        assert isinstance(admin, ReassignmentAdmin)
        await admin.create_topics({"t": (1, 1)})
        t = admin.topic("t")
        assert t is not None
        tp = TopicIdPartition(t.topic_id, 0)
        old = t.partitions[0].leader
        new = next(x for x in (1, 2, 3) if x != old)
        answers = await admin.alter_reassignments({("t", 0): (new,), ("t", 4): (1,), ("t", 1): ()})
        assert answers == {
            ("t", 0): None,
            ("t", 4): Refused(Errors.UNKNOWN_TOPIC_OR_PARTITION, "Unable to find partition t:4."),
            ("t", 1): Refused(Errors.UNKNOWN_TOPIC_OR_PARTITION, "Unable to find partition t:1."),
        }
        p = admin.partition(tp)
        assert p is not None and p.replicas == (new, old) and p.adding == (new,) and p.removing == (old,)
        assert await admin.list_reassignments(None) == [Reassignment("t", 0, (new, old), (new,), (old,))]
        bad = await admin.alter_reassignments({("t", 0): (new, new)})
        assert bad[("t", 0)] == Refused(
            Errors.INVALID_REPLICA_ASSIGNMENT,
            f"The manual partition assignment includes the broker {new} more than once.",
        )
        leader = b.sources[old]
        assert await leader.wait_for(lambda: leader.partition(tp) == p, WAIT_S)
        assert await leader.alter_partition(old, tp, p.leader_epoch, p.partition_epoch, (new, old)) == (
            Errors.NEW_LEADER_ELECTED
        )
        assert await admin.wait_for(lambda: admin.partition(tp).replicas == (new,), WAIT_S)  # type: ignore[union-attr]
        done = admin.partition(tp)
        assert isinstance(done, PartitionInfo) and done.leader == new and done.isr == (new,)
        assert done.leader_epoch == p.leader_epoch + 1 and done.partition_epoch > p.partition_epoch
        assert await admin.list_reassignments(None) == []
        assert await admin.alter_reassignments({("t", 0): None}) == {
            ("t", 0): Refused(Errors.NO_REASSIGNMENT_IN_PROGRESS, NO_REASSIGNMENT_MESSAGE)
        }
        # Start and cancel: back on the replicas before the one being added.
        third = next(x for x in (1, 2, 3) if x not in (old, new))
        assert await admin.alter_reassignments({("t", 0): (third,)}) == {("t", 0): None}
        assert await admin.alter_reassignments({("t", 0): None}) == {("t", 0): None}
        back = admin.partition(tp)
        assert back is not None and back.replicas == (new,) and back.leader == new and not back.adding
        # Growth keeps the moved partition's own replicas (the topic key holds them as created).
        grown = (await admin.create_partitions({"t": NewPartitions(2)}, False))["t"]
        assert not isinstance(grown, Refused), grown
        assert admin.partition(tp) == back
        assert admin.view.refused == 0

    with EtcdCluster(str(tmp_path / "etcd")) as etcd:
        with_brokers(etcd, body)
