"""The simulated cluster's shape as :class:`partlog.controller.cluster_meta.StaticMetadata`:
broker ids and AZs, one topic, leaders and replicas; and the metadata
versions events produce (leaders moved, brokers gone).

Routing (``representative``, ``produce_target``) is the real code's: the
simulator never computes a representative itself.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping

from partlog.controller.cluster_meta import (
    NO_LEADER,
    BrokerInfo,
    PartitionInfo,
    StaticMetadata,
    TopicInfo,
    topic_id_for,
)
from partlog.kafka.records import TopicIdPartition
from simulations.scenario import ClusterSpec

# One fixed cluster: runs with one seed must print identical output.
CLUSTER_ID = uuid.uuid5(uuid.NAMESPACE_URL, "partlog-simulation")
TOPIC_NAME = "sim"
TOPIC_ID = topic_id_for(CLUSTER_ID, TOPIC_NAME)
# Design (b)'s coordinator as a commit target: not a broker id (those start at 1).
COORDINATOR_ID = 0


def broker_azs(cluster: ClusterSpec) -> dict[int, str]:
    """Broker id -> AZ.  Ids are dealt round-robin over the AZs (1 in the
    first AZ, 2 in the second, ...), skipping full AZs, so leaders assigned
    round-robin by id spread over AZs in proportion to their brokers."""
    out: dict[int, str] = {}
    next_id = 1
    for r in range(max(cluster.brokers_per_az)):
        for az, n in zip(cluster.azs, cluster.brokers_per_az, strict=True):
            if r < n:
                out[next_id] = az
                next_id += 1
    return out


def initial_metadata(cluster: ClusterSpec) -> StaticMetadata:
    """Partition p led by broker ``p mod N + 1``; followers are the next
    brokers by id in AZs not yet holding a replica (one replica per AZ while
    the replication factor allows, as the controller places them)."""
    azs = broker_azs(cluster)
    ids = sorted(azs)
    n = len(ids)
    leaders = []
    replicas = []
    for p in range(cluster.partitions):
        leader = ids[p % n]
        reps = [leader]
        used_azs = {azs[leader]}
        # First pass: distinct AZs; second: any broker, once the AZs are used up.
        for distinct in (True, False):
            for k in range(1, n):
                if len(reps) == cluster.replication_factor:
                    break
                b = ids[(p + k) % n]
                if b in reps or (distinct and azs[b] in used_azs):
                    continue
                reps.append(b)
                used_azs.add(azs[b])
        leaders.append(leader)
        replicas.append(reps)
    brokers = [BrokerInfo(b, azs[b]) for b in ids]
    return StaticMetadata(
        brokers, [TopicInfo.with_leaders(TOPIC_ID, TOPIC_NAME, leaders, replicas)], cluster_id=CLUSTER_ID
    )


def topic_partitions(cluster: ClusterSpec) -> list[TopicIdPartition]:
    return [TopicIdPartition(TOPIC_ID, p) for p in range(cluster.partitions)]


def _topic(md: StaticMetadata) -> TopicInfo:
    [t] = md.topics()
    return t


def with_leaders(md: StaticMetadata, new_leaders: Mapping[int, int]) -> StaticMetadata:
    """``md`` with partition p led by ``new_leaders[p]`` (a replica), at the next leader epoch."""
    t = _topic(md)
    parts = list(t.partitions)
    for p, leader in new_leaders.items():
        old = parts[p]
        assert leader in old.replicas, f"partition {p}: new leader {leader} not in replicas {old.replicas}"
        parts[p] = PartitionInfo(leader, old.leader_epoch + 1, old.replicas, old.isr, old.partition_epoch + 1)
    return md.with_topics([TopicInfo(t.topic_id, t.name, tuple(parts))])


def without_brokers(md: StaticMetadata, gone: Iterable[int]) -> StaticMetadata:
    """``md`` after the controller fenced ``gone``: they leave the broker list
    (so representatives are recomputed over the live brokers, as
    ``ControllerMetadata`` does), every replica set and ISR; partitions they
    led move to their first remaining replica, or go offline."""
    gone = set(gone)
    brokers = [b for b in md.brokers() if b.broker_id not in gone]
    t = _topic(md)
    parts = []
    for old in t.partitions:
        reps = tuple(r for r in old.replicas if r not in gone)
        isr = tuple(r for r in old.isr if r not in gone)
        if old.leader in gone or old.leader == NO_LEADER:
            leader = reps[0] if reps else NO_LEADER
            parts.append(PartitionInfo(leader, old.leader_epoch + 1, reps, isr, old.partition_epoch + 1))
        elif reps != old.replicas:
            parts.append(PartitionInfo(old.leader, old.leader_epoch, reps, isr, old.partition_epoch + 1))
        else:
            parts.append(old)
    return StaticMetadata(brokers, [TopicInfo(t.topic_id, t.name, tuple(parts))], cluster_id=md.cluster_id)
