"""KIP-966 on etcd, in part (docs/design/elr.md), against a real 3-member
etcd: a broker back after an unclean shutdown is taken out of the ISR it
was the last member of before it is accepted, so it never leads from it;
back clean, it leads again (KRaft's older rule, which etcd still runs)."""

from __future__ import annotations

import functools

from partlog.controller.cluster_meta import NO_LEADER, BrokerInfo, PartitionInfo, TopicInfo
from partlog.controller.etcd_meta import EtcdMetadata
from partlog.kafka.records import TopicIdPartition
from partlog.tools.etcd_launcher import EtcdCluster
from tests.system.test_etcd_metadata import SESSION_MS, WAIT_S, Brokers, etcd, needs_etcd, with_brokers

__all__ = ["etcd"]  # the module's etcd cluster (a fixture)


@needs_etcd
def test_an_unclean_last_isr_member_does_not_lead_again(etcd: EtcdCluster) -> None:
    for unclean in (True, False):
        with_brokers(etcd, functools.partial(_last_member_back, unclean=unclean))


async def _last_member_back(brokers: Brokers, unclean: bool) -> None:
    await brokers.start(3)
    admin = brokers.admin
    t = (await admin.create_topics({"t": (1, 2)}))["t"]
    assert isinstance(t, TopicInfo)
    tp = TopicIdPartition(t.topic_id, 0)
    p = t.partitions[0]
    leader = brokers.sources[p.leader]
    assert await leader.wait_for(lambda: leader.partition(tp) is not None, WAIT_S)
    # The leader alone in the ISR, then it goes (its lease runs out): offline, it the last member.
    shrunk = await leader.alter_partition(p.leader, tp, p.leader_epoch, p.partition_epoch, (p.leader,))
    assert isinstance(shrunk, PartitionInfo)
    await brokers.sources.pop(p.leader).stop()

    def now() -> PartitionInfo | None:
        return admin.partition(tp)

    assert await admin.wait_for(lambda: (q := now()) is not None and q.leader == NO_LEADER, WAIT_S)
    assert now().isr == (p.leader,)  # type: ignore[union-attr]
    back = EtcdMetadata(
        brokers.url, BrokerInfo(p.leader, f"az{p.leader % 3}", "127.0.0.1", 9000 + p.leader),
        create_cluster=True, session_timeout_ms=SESSION_MS,
    )  # fmt: skip
    assert back.session is not None
    back.session.unclean_shutdown = unclean
    await back.start(timeout_ms=10_000)
    brokers.sources[p.leader] = back
    assert await admin.wait_for(lambda: admin.view.accepted(p.leader), WAIT_S)
    if unclean:
        # Out of the ISR before it was accepted; nothing else is known to be safe: offline.
        q = now()
        assert q is not None and (q.leader, q.isr) == (NO_LEADER, ()), q
    else:
        assert await admin.wait_for(lambda: (q := now()) is not None and q.leader == p.leader, WAIT_S)
