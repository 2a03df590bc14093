"""The simulated cluster's shape as :class:`partlog.controller.cluster_meta.StaticMetadata`:
broker ids and AZs, one topic, leaders and replicas; and the metadata
versions events produce (leaders moved, brokers gone).

Routing (``representative``, ``produce_target``) is the real code's: the
simulator never computes a representative itself.
"""

from __future__ import annotations

import random
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


def rack_alternated_brokers(azs: Mapping[int, str]) -> list[int]:
    """Kafka's ``getRackAlternatedBrokerList``: one broker of each rack in
    turn (racks sorted by name, brokers by id), so consecutive brokers are in
    different racks."""
    by_rack: dict[str, list[int]] = {}
    for b in sorted(azs):
        by_rack.setdefault(azs[b], []).append(b)
    racks = [by_rack[r] for r in sorted(by_rack)]
    out: list[int] = []
    for i in range(max(len(r) for r in racks)):
        out.extend(r[i] for r in racks if i < len(r))
    return out


def rack_aware_assignment(
    azs: Mapping[int, str], partitions: int, replication_factor: int, start_index: int, shift: int
) -> list[list[int]]:
    """Kafka's rack-aware replica assignment (``AdminUtils
    .assignReplicasToBrokersRackAware``): the first replica of partition p
    is broker ``(p + start_index) mod n`` of the rack-alternated list; each
    next replica steps by a shift that grows every n partitions, skipping
    brokers in racks that already hold a replica (until every rack has one)
    and brokers already chosen.  Kafka draws ``start_index`` and ``shift`` at
    random; here they come from the run's seed."""
    arranged = rack_alternated_brokers(azs)
    n = len(arranged)
    racks = len(set(azs.values()))
    out = []
    next_shift = shift
    for p in range(partitions):
        if p > 0 and p % n == 0:
            next_shift += 1
        first = (p + start_index) % n
        leader = arranged[first]
        reps = [leader]
        used_racks = {azs[leader]}
        k = 0
        while len(reps) < replication_factor:
            # Kafka's replicaIndex(first, shift * racks, k, n)
            step = 1 + (next_shift * racks + k) % (n - 1)
            b = arranged[(first + step) % n]
            k += 1
            if (azs[b] not in used_racks or len(used_racks) == racks) and b not in reps:
                reps.append(b)
                used_racks.add(azs[b])
        out.append(reps)
    return out


def initial_metadata(cluster: ClusterSpec, rng: random.Random | None = None) -> StaticMetadata:
    """Replicas by Kafka's rack-aware assignment (AZs are racks); the first
    replica leads.  ``rng`` draws Kafka's random start index and shift
    (None: both 0, the assignment of ``--replica-assignment`` tests)."""
    azs = broker_azs(cluster)
    n = len(azs)
    start, shift = (rng.randrange(n), rng.randrange(n)) if rng is not None else (0, 0)
    replicas = rack_aware_assignment(azs, cluster.partitions, min(cluster.replication_factor, n), start, shift)
    leaders = [r[0] for r in replicas]
    brokers = [BrokerInfo(b, azs[b]) for b in sorted(azs)]
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
